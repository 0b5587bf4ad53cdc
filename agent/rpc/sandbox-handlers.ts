// Server side of the sandbox RPCs (files and snapshots): decode, call the
// implementation, encode. A cancelled ReadFile stops reading; a WriteFile
// whose client goes away before the end leaves no file (the implementation
// writes to a temp name and renames only once the data ended cleanly).

import type * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import type { ContainerStatus, RunContainerRequest } from "../../api/index.ts";
import {
  containerToProto,
  imageToProto,
  runRequestFromProto,
  type WireRunContainerRequest,
} from "../../api/grpc/index.ts";
import { type Authorize, hasMethods, refusingHandlers, unary } from "./container-handlers.ts";
import { toGrpcError } from "../../api/grpc/index.ts";
import type { ContainerFilesApi, ContainerSnapshotApi } from "../../api/index.ts";
import { fileInfoToProto, matchToProto } from "../../api/grpc/index.ts";

export type SandboxApi = ContainerFilesApi & ContainerSnapshotApi;

const SANDBOX_METHODS = [
  "statPath",
  "listDir",
  "readFile",
  "writeFile",
  "deleteFile",
  "createDirectory",
  "deleteDirectory",
  "findInFiles",
  "replaceInFiles",
  "commitFilesystem",
  "checkpointSupport",
  "checkpointMemory",
  "restoreMemory",
] as const satisfies readonly (keyof SandboxApi)[];

/** Whether `x` (a ContainerApi, say) implements the sandbox half too, as ContainerHost does. */
export function isSandboxApi(x: unknown): x is SandboxApi {
  return hasMethods(x, SANDBOX_METHODS);
}

interface PathWire {
  containerId: string;
  path: string;
}

interface WriteChunkWire {
  containerId: string;
  path: string;
  mode?: number;
  data: Buffer;
}

function notServed(): BerthError {
  return new BerthError(
    "not_implemented",
    "this agent does not serve the sandbox API (it was started without a container host)",
  );
}

function readFile(impl: SandboxApi, authorize: Authorize) {
  return (call: grpc.ServerWritableStream<PathWire, unknown>) => {
    const abort = new AbortController();
    call.on("cancelled", () => abort.abort());
    (async () => {
      authorize(call);
      const { containerId, path } = call.request;
      for await (const chunk of impl.readFile(containerId, path, { signal: abort.signal })) {
        if (call.cancelled) break;
        const data = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
        if (!call.write({ data }) && !call.cancelled) await new Promise((r) => call.once("drain", r));
      }
    })().then(
      () => {
        if (!call.cancelled) call.end();
      },
      (e: unknown) => {
        if (!call.cancelled) call.emit("error", toGrpcError(e));
      },
    );
  };
}

/** Client streaming: the first chunk names the file, every chunk may carry data. */
function writeFile(impl: SandboxApi, authorize: Authorize) {
  return (
    call: grpc.ServerReadableStream<WriteChunkWire, unknown>,
    callback: grpc.sendUnaryData<unknown>,
  ) => {
    (async () => {
      authorize(call);
      const chunks = call[Symbol.asyncIterator]() as AsyncIterator<WriteChunkWire>;
      const first = await chunks.next();
      if (first.done || !first.value.containerId || !first.value.path) {
        throw new BerthError(
          "invalid_request",
          "WriteFile: the first message must carry container_id and path",
        );
      }
      const { containerId, path, mode } = first.value;
      async function* data(): AsyncGenerator<Uint8Array> {
        if (first.value.data.length > 0) yield first.value.data;
        for (;;) {
          const next = await chunks.next();
          if (next.done) {
            // A cancelled call ends the stream too (grpc-js destroys it): that is no complete upload.
            if (call.cancelled)
              throw new BerthError("unavailable", "WriteFile: the client cancelled the upload");
            return;
          }
          if (next.value.containerId || next.value.path) {
            throw new BerthError("invalid_request", "WriteFile: only the first message may name the file");
          }
          if (next.value.data.length > 0) yield next.value.data;
        }
      }
      const info = await impl.writeFile(containerId, path, data(), mode === undefined ? {} : { mode });
      return fileInfoToProto(info);
    })().then(
      (res) => callback(null, res),
      (e: unknown) => callback(toGrpcError(e)),
    );
  };
}

/** The sandbox RPC handlers; every one refuses with not_implemented when `impl` is absent. */
export function sandboxHandlers(
  impl: SandboxApi | undefined,
  authorize: Authorize,
): grpc.UntypedServiceImplementation {
  if (!impl) {
    return refusingHandlers(authorize, notServed, {
      unary: [
        "StatPath",
        "ListDir",
        "WriteFile",
        "DeleteFile",
        "CreateDirectory",
        "DeleteDirectory",
        "FindInFiles",
        "ReplaceInFiles",
        "CommitFilesystem",
        "CheckpointSupport",
        "CheckpointMemory",
        "RestoreMemory",
      ],
      stream: ["ReadFile"],
    });
  }
  const c = impl;
  const status = async (p: Promise<ContainerStatus>) => containerToProto(await p);
  return {
    StatPath: unary(authorize, async (r: PathWire) =>
      fileInfoToProto(await c.statPath(r.containerId, r.path)),
    ),
    ListDir: unary(authorize, async (r: PathWire) => ({
      files: (await c.listDir(r.containerId, r.path)).map(fileInfoToProto),
    })),
    ReadFile: readFile(c, authorize),
    WriteFile: writeFile(c, authorize),
    DeleteFile: unary(authorize, async (r: PathWire) => {
      await c.deleteFile(r.containerId, r.path);
      return {};
    }),
    CreateDirectory: unary(authorize, async (r: PathWire) =>
      fileInfoToProto(await c.createDirectory(r.containerId, r.path)),
    ),
    DeleteDirectory: unary(authorize, async (r: PathWire) => {
      await c.deleteDirectory(r.containerId, r.path);
      return {};
    }),
    FindInFiles: unary(authorize, async (r: PathWire & { pattern: string }) => ({
      matches: (await c.findInFiles(r.containerId, r.path, r.pattern)).map(matchToProto),
    })),
    ReplaceInFiles: unary(authorize, async (r: PathWire & { oldString: string; newString: string }) => ({
      files: await c.replaceInFiles(r.containerId, r.path, r.oldString, r.newString),
    })),
    CommitFilesystem: unary(authorize, async (r: { containerId: string; ref: string }) =>
      imageToProto(await c.commitFilesystem(r.containerId, r.ref)),
    ),
    CheckpointSupport: unary(authorize, () => c.checkpointSupport()),
    CheckpointMemory: unary(authorize, (r: { containerId: string; snapshotId: string }) =>
      c.checkpointMemory(r.containerId, r.snapshotId),
    ),
    RestoreMemory: unary(authorize, (r: { snapshotId: string; request: WireRunContainerRequest | null }) => {
      if (!r.request)
        throw new BerthError("invalid_request", "RestoreMemory needs the new container's request");
      const req: RunContainerRequest = runRequestFromProto(r.request);
      return status(c.restoreMemory(r.snapshotId, req));
    }),
  };
}
