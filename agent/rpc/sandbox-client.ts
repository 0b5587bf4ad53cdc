// ContainerFilesApi and ContainerSnapshotApi over gRPC (the calls behind
// AgentRpcClient). Calls that may walk a tree, unpack an image or dump
// memory get the long deadline; ReadFile has none (it ends with the file, or
// when the caller aborts or leaves the loop), WriteFile the long one.

import * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import { AsyncQueue } from "./async-queue.ts";
import type { ContainerStatus, ImageSummary, RunContainerRequest } from "./container-api.ts";
import { method, type RpcChannel, unaryCall } from "./container-client.ts";
import {
  containerFromProto,
  imageFromProto,
  runRequestToProto,
  type WireContainer,
  type WireImage,
} from "./container-convert.ts";
import { fromGrpcError } from "./errors.ts";
import type {
  ContainerFilesApi,
  ContainerSnapshotApi,
  FileInfo,
  FileSearchMatch,
  ReplaceResult,
} from "./sandbox-api.ts";
import {
  fileInfoFromProto,
  matchFromProto,
  replaceResultFromProto,
  type WireFileInfo,
  type WireFileSearchMatch,
} from "./sandbox-convert.ts";

/** Largest data field of one WriteFile message. */
export const WRITE_FILE_CHUNK_BYTES = 64 * 1024;

type StreamMethod = (
  request: object,
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
) => grpc.ClientReadableStream<unknown>;

type ClientStreamMethod = (
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
  callback: (err: grpc.ServiceError | null, res?: unknown) => void,
) => grpc.ClientWritableStream<unknown>;

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
    const { signal } = opts;
    if (signal?.aborted) return;
    const call = method<StreamMethod>(this.ch, "ReadFile").call(
      this.ch.client,
      { containerId, path },
      new grpc.Metadata(),
      {},
    );
    const queue = new AsyncQueue<{ data: Buffer }>({
      onFull: () => call.pause(),
      onDrained: () => call.resume(),
      highWater: 64,
    });
    call.on("data", (w: { data: Buffer }) => queue.push(w));
    call.on("error", (e) => queue.fail(e));
    call.on("end", () => queue.end());
    const onAbort = () => call.cancel();
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const w of queue) yield new Uint8Array(w.data.buffer, w.data.byteOffset, w.data.byteLength);
    } catch (e) {
      if (signal?.aborted && (e as Partial<grpc.ServiceError>).code === grpc.status.CANCELLED) return;
      throw fromGrpcError(e, { address: this.ch.address, deadlineMs: this.ch.deadlineMs });
    } finally {
      signal?.removeEventListener("abort", onAbort);
      call.cancel();
    }
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
    const deadlineMs = this.ch.longDeadlineMs;
    let settled = false;
    let call!: grpc.ClientWritableStream<unknown>;
    const done = new Promise<FileInfo>((resolve, reject) => {
      call = method<ClientStreamMethod>(this.ch, "WriteFile").call(
        this.ch.client,
        new grpc.Metadata(),
        { deadline: new Date(Date.now() + deadlineMs) },
        (err, res) => {
          settled = true;
          if (err) reject(fromGrpcError(err, { address: this.ch.address, deadlineMs }));
          else resolve(fileInfoFromProto(res as WireFileInfo));
        },
      );
    });
    const write = (msg: object) =>
      call.write(msg)
        ? Promise.resolve()
        : Promise.race([new Promise<void>((r) => call.once("drain", () => r())), done.then(() => {})]);
    try {
      await write(opts.mode === undefined ? { containerId, path } : { containerId, path, mode: opts.mode });
      for await (const chunk of data) {
        // The agent answered early (it refused the path): stop sending.
        if (settled) break;
        for (let off = 0; off < chunk.byteLength; off += WRITE_FILE_CHUNK_BYTES) {
          const part = chunk.subarray(off, off + WRITE_FILE_CHUNK_BYTES);
          await write({ data: Buffer.from(part.buffer, part.byteOffset, part.byteLength) });
        }
      }
      call.end();
    } catch (e) {
      // Cancelled before the end: the agent drops its temp file, nothing appears.
      call.cancel();
      await done.catch(() => {});
      throw e;
    }
    return done;
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
