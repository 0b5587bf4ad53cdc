// ContainerFilesApi and ContainerSnapshotApi over gRPC (the calls behind
// AgentRpcClient). Calls that may walk a tree, unpack an image or dump
// memory get the long deadline; ReadFile has none (it ends with the file, or
// when the caller aborts or leaves the loop), WriteFile the long one.

import { BerthError } from "../../shared/errors.ts";
import type { ContainerStatus, ImageSummary, RunContainerRequest } from "../containers.ts";
import { type RpcChannel, streamCall, unaryCall, uploadCall } from "./container-client.ts";
import {
  containerFromProto,
  imageFromProto,
  runRequestToProto,
  type WireContainer,
  type WireImage,
} from "./container-convert.ts";
import type { ContainerFilesApi, FileInfo, FileSearchMatch, ReplaceResult } from "../files.ts";
import type { ContainerSnapshotApi } from "../snapshots.ts";
import {
  fileInfoFromProto,
  matchFromProto,
  replaceResultFromProto,
  type WireFileInfo,
  type WireFileSearchMatch,
} from "./files-convert.ts";

/** Largest data field of one WriteFile message. */
export const WRITE_FILE_CHUNK_BYTES = 64 * 1024;

export class SandboxRpcClient implements ContainerFilesApi, ContainerSnapshotApi {
  constructor(private readonly ch: RpcChannel) {}

  private call(name: string, req: object, long = false): Promise<unknown> {
    return unaryCall(this.ch, name, req, long ? this.ch.longDeadlineMs : this.ch.deadlineMs);
  }

  async statPath(containerId: string, path: string): Promise<FileInfo> {
    return fileInfoFromProto((await this.call("StatPath", { containerId, path })) as WireFileInfo);
  }

  async listDir(containerId: string, path: string): Promise<FileInfo[]> {
    const res = (await this.call("ListDir", { containerId, path })) as { files: WireFileInfo[] };
    return res.files.map(fileInfoFromProto);
  }

  async *readFile(
    containerId: string,
    path: string,
    opts: { signal?: AbortSignal } = {},
  ): AsyncGenerator<Uint8Array> {
    const frames = streamCall<{ data: Buffer }>(this.ch, "ReadFile", { containerId, path }, { ...opts, highWater: 64 });
    for await (const w of frames) yield new Uint8Array(w.data.buffer, w.data.byteOffset, w.data.byteLength);
  }

  async writeFile(
    containerId: string,
    path: string,
    data: AsyncIterable<Uint8Array>,
    opts: { mode?: number } = {},
  ): Promise<FileInfo> {
    if (typeof containerId !== "string" || containerId === "" || typeof path !== "string" || path === "") {
      throw new BerthError("invalid_request", "writeFile needs a container id and a path");
    }
    const first = opts.mode === undefined ? { containerId, path } : { containerId, path, mode: opts.mode };
    const res = await uploadCall(this.ch, "WriteFile", first, data, WRITE_FILE_CHUNK_BYTES);
    return fileInfoFromProto(res as WireFileInfo);
  }

  async deleteFile(containerId: string, path: string): Promise<void> {
    await this.call("DeleteFile", { containerId, path });
  }

  async createDirectory(containerId: string, path: string): Promise<FileInfo> {
    return fileInfoFromProto((await this.call("CreateDirectory", { containerId, path })) as WireFileInfo);
  }

  async deleteDirectory(containerId: string, path: string): Promise<void> {
    await this.call("DeleteDirectory", { containerId, path }, true);
  }

  async findInFiles(containerId: string, path: string, pattern: string): Promise<FileSearchMatch[]> {
    const res = (await this.call("FindInFiles", { containerId, path, pattern }, true)) as {
      matches: WireFileSearchMatch[];
    };
    return res.matches.map(matchFromProto);
  }

  async replaceInFiles(
    containerId: string,
    path: string,
    oldString: string,
    newString: string,
  ): Promise<ReplaceResult[]> {
    const req = { containerId, path, oldString, newString };
    const res = (await this.call("ReplaceInFiles", req, true)) as { files: ReplaceResult[] };
    return res.files.map(replaceResultFromProto);
  }

  async commitFilesystem(containerId: string, ref: string): Promise<ImageSummary> {
    return imageFromProto((await this.call("CommitFilesystem", { containerId, ref }, true)) as WireImage);
  }

  async checkpointSupport(): Promise<{ supported: boolean; reason?: string }> {
    const res = (await this.call("CheckpointSupport", {}, true)) as { supported: boolean; reason?: string };
    return res.reason === undefined
      ? { supported: res.supported }
      : { supported: res.supported, reason: res.reason };
  }

  async checkpointMemory(
    containerId: string,
    snapshotId: string,
  ): Promise<{ snapshotId: string; sizeBytes: number }> {
    const res = (await this.call("CheckpointMemory", { containerId, snapshotId }, true)) as {
      snapshotId: string;
      sizeBytes: number;
    };
    return { snapshotId: res.snapshotId, sizeBytes: res.sizeBytes };
  }

  async restoreMemory(snapshotId: string, req: RunContainerRequest): Promise<ContainerStatus> {
    const wire = { snapshotId, request: runRequestToProto(req) };
    return containerFromProto((await this.call("RestoreMemory", wire, true)) as WireContainer);
  }
}
