// Server side of the container RPCs: decode, call the ContainerApi, encode.
// Streaming calls carry the client's intent back to the implementation: a
// cancelled StreamLogs aborts its AbortSignal; an Exec whose client
// half-closes gets closeStdin, one whose client cancels is killed.

import { constants } from "node:os";
import type * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import type { ContainerApi, ExecSession } from "../../api/index.ts";
import {
  runRequestFromProto,
  type WireContainer,
  type WireCredentials,
  type WireEgressPolicy,
  type WireExecRequest,
  type WireRunContainerRequest,
  containerToProto,
  credentialsFromProto,
  egressFromProto,
  execRequestFromProto,
  imageToProto,
  logEntryToProto,
} from "../../api/grpc/index.ts";
import { toGrpcError } from "../../api/grpc/index.ts";
import {
  type WireGcImagesRequest,
  type WireImportImageRequest,
  gcRequestFromProto,
  gcResultToProto,
  importRequestFromProto,
} from "../../api/grpc/index.ts";

/** Throws (a BerthError) when the caller may not call; see server.ts. */
export type Authorize = (call: Pick<grpc.ServerUnaryCall<unknown, unknown>, "getAuthContext">) => void;

type Call = grpc.ServerUnaryCall<unknown, unknown>;

export function unary<Req, Res>(
  authorize: Authorize,
  run: (req: Req) => Promise<Res>,
): grpc.handleUnaryCall<Req, Res> {
  return (call, callback) => {
    Promise.resolve()
      .then(() => authorize(call as Call))
      .then(() => run(call.request))
      .then(
        (res) => callback(null, res),
        (e: unknown) => callback(toGrpcError(e)),
      );
  };
}

/**
 * The handlers of a service the agent was started without: every unary call
 * and every stream answers `notServed()` (not_implemented, naming what is
 * missing) once the caller is authorized.
 */
export function refusingHandlers(
  authorize: Authorize,
  notServed: () => BerthError,
  calls: { unary: readonly string[]; stream: readonly string[] },
): grpc.UntypedServiceImplementation {
  const refuseUnary = unary(authorize, async () => {
    throw notServed();
  });
  const refuseStream = (
    call: grpc.ServerWritableStream<unknown, unknown> | grpc.ServerDuplexStream<unknown, unknown>,
  ) => {
    call.on("error", () => {});
    fail(call, notServed());
  };
  return Object.fromEntries([
    ...calls.unary.map((name) => [name, refuseUnary]),
    ...calls.stream.map((name) => [name, refuseStream]),
  ]);
}

/** Whether `x` has each of `methods` as a function: an implementation that serves another API too, as ContainerHost does. */
export function hasMethods(x: unknown, methods: readonly string[]): boolean {
  return !!x && methods.every((m) => typeof (x as Record<string, unknown>)[m] === "function");
}

interface StreamLogsWire {
  id: string;
  follow: boolean;
  tail?: number;
}

type ExecInputWire =
  | { input: "start"; start: { containerId: string; request: WireExecRequest | null } }
  | { input: "stdin"; stdin: Buffer }
  | { input: "closeStdin" }
  | { input: "resize"; resize: { cols: number; rows: number } }
  | { input: "signal"; signal: string };

type Writable = { write(msg: unknown): boolean; once(ev: "drain", fn: () => void): unknown };

/** Writes, then waits for the stream to drain when its buffer is full. */
function writeAndDrain(call: Writable & { cancelled: boolean }, msg: unknown): Promise<void> {
  if (call.write(msg) || call.cancelled) return Promise.resolve();
  return new Promise((resolve) => call.once("drain", resolve));
}

function fail(call: { emit(ev: "error", e: unknown): boolean }, e: unknown): void {
  call.emit("error", toGrpcError(e));
}

/**
 * A server stream of what `open` yields, each item encoded by `encode`. The
 * caller's cancel aborts `open`'s signal and stops the sending; a full buffer
 * waits for drain; the end, or an error as its gRPC status, closes the call.
 */
export function serverStream<Req, T>(
  authorize: Authorize,
  open: (req: Req, signal: AbortSignal) => AsyncIterable<T>,
  encode: (item: T) => unknown,
): (call: grpc.ServerWritableStream<Req, unknown>) => void {
  return (call) => {
    const abort = new AbortController();
    call.on("cancelled", () => abort.abort());
    (async () => {
      authorize(call);
      for await (const item of open(call.request, abort.signal)) {
        if (call.cancelled) break;
        await writeAndDrain(call, encode(item));
      }
    })().then(
      () => {
        if (!call.cancelled) call.end();
      },
      (e: unknown) => {
        if (!call.cancelled) fail(call, e);
      },
    );
  };
}

function notServed(): BerthError {
  return new BerthError(
    "not_implemented",
    "this agent does not serve the container API (it was started without a container host)",
  );
}

const isSignal = (s: string): s is NodeJS.Signals => Object.hasOwn(constants.signals, s);

function streamLogs(containers: ContainerApi, authorize: Authorize) {
  return serverStream(
    authorize,
    ({ id, follow, tail }: StreamLogsWire, signal) => {
      const opts: { follow: boolean; tail?: number; signal: AbortSignal } = { follow, signal };
      if (tail !== undefined) opts.tail = tail;
      return containers.streamLogs(id, opts);
    },
    logEntryToProto,
  );
}

function exec(containers: ContainerApi, authorize: Authorize) {
  return (call: grpc.ServerDuplexStream<ExecInputWire, unknown>) => {
    let session: ExecSession | undefined;
    let stdinClosed = false;
    let pending: ExecInputWire[] | undefined = [];
    const closeStdin = () => {
      if (stdinClosed || !session) return;
      stdinClosed = true;
      session.closeStdin();
    };
    const apply = (msg: ExecInputWire) => {
      const s = session!;
      switch (msg.input) {
        case "stdin":
          if (!stdinClosed) s.writeStdin(new Uint8Array(msg.stdin));
          return;
        case "closeStdin":
          return closeStdin();
        case "resize":
          return s.resize?.(msg.resize.cols, msg.resize.rows);
        case "signal":
          if (msg.signal === "") return s.kill();
          if (!isSignal(msg.signal))
            throw new BerthError("invalid_request", `${msg.signal} is not a signal name`);
          return s.kill(msg.signal);
        case "start":
          throw new BerthError("invalid_request", "exec: start may only be the first message");
      }
    };
    // Set once the exit code or an error status went out: nothing to kill after that.
    let finished = false;
    const failOnce = (e: unknown) => {
      if (finished || call.cancelled) return;
      finished = true;
      session?.kill();
      fail(call, e);
    };
    call.on("cancelled", () => {
      if (!finished) session?.kill();
    });
    call.on("end", () => {
      // Half-close before start: nothing will ever start.
      if (!session && pending) pending.push({ input: "closeStdin" });
      else closeStdin();
    });
    let started = false;
    call.on("data", (msg: ExecInputWire) => {
      try {
        if (!started) {
          started = true;
          if (msg.input !== "start")
            throw new BerthError("invalid_request", "exec: the first message must be start");
          begin(msg.start.containerId, msg.start.request);
        } else if (pending) pending.push(msg);
        else apply(msg);
      } catch (e) {
        failOnce(e);
      }
    });

    const begin = (containerId: string, wireReq: WireExecRequest | null) => {
      (async () => {
        authorize(call);
        const req = execRequestFromProto(wireReq);
        session = await containers.exec(containerId, req);
        if (call.cancelled) {
          session.kill();
          return;
        }
        await writeAndDrain(call, { started: {} });
        for (const msg of pending ?? []) apply(msg);
        pending = undefined;
        for await (const chunk of session.output) {
          if (call.cancelled) break;
          const data = Buffer.from(chunk.data.buffer, chunk.data.byteOffset, chunk.data.byteLength);
          await writeAndDrain(call, chunk.stream === "stdout" ? { stdout: data } : { stderr: data });
        }
        const code = await session.exit;
        if (call.cancelled || finished) return;
        finished = true;
        call.write({ exitCode: code });
        call.end();
      })().catch(failOnce);
    };
  };
}

/** The container RPC handlers; every one refuses with not_implemented when `containers` is absent. */
export function containerHandlers(
  containers: ContainerApi | undefined,
  authorize: Authorize,
): grpc.UntypedServiceImplementation {
  if (!containers) {
    return refusingHandlers(authorize, notServed, {
      unary: [
        "RunContainer",
        "StopContainer",
        "GetContainer",
        "ListContainers",
        "PullImage",
        "ListImages",
        "RemoveImage",
        "ImportImage",
        "GcImages",
        "SetNetworkPolicy",
        "ExposePort",
        "HasCode",
        "PutCode",
      ],
      stream: ["StreamLogs", "Exec"],
    });
  }
  const c = containers;
  const status = async (p: Promise<Parameters<typeof containerToProto>[0]>): Promise<WireContainer> =>
    containerToProto(await p);
  return {
    RunContainer: unary(authorize, (req: WireRunContainerRequest) =>
      status(c.runContainer(runRequestFromProto(req))),
    ),
    StopContainer: unary(authorize, (req: { id: string; graceMs?: number; remove?: boolean }) => {
      const opts: { graceMs?: number; remove?: boolean } = {};
      if (req.graceMs !== undefined) opts.graceMs = req.graceMs;
      if (req.remove !== undefined) opts.remove = req.remove;
      return status(c.stopContainer(req.id, opts));
    }),
    GetContainer: unary(authorize, (req: { id: string }) => status(c.getContainer(req.id))),
    ListContainers: unary(authorize, async (req: { labels: Record<string, string> }) => {
      const list = await c.listContainers(
        Object.keys(req.labels).length ? { labels: req.labels } : undefined,
      );
      return { containers: list.map(containerToProto) };
    }),
    StreamLogs: streamLogs(c, authorize),
    Exec: exec(c, authorize),
    PullImage: unary(authorize, async (req: { ref: string; credentials: WireCredentials | null }) => {
      const credentials = credentialsFromProto(req.credentials);
      return imageToProto(await c.pullImage(req.ref, credentials ? { credentials } : undefined));
    }),
    ListImages: unary(authorize, async () => ({ images: (await c.listImages()).map(imageToProto) })),
    RemoveImage: unary(authorize, async (req: { ref: string }) => {
      await c.removeImage(req.ref);
      return {};
    }),
    ImportImage: unary(authorize, async (req: WireImportImageRequest) =>
      imageToProto(await c.importImage(importRequestFromProto(req))),
    ),
    GcImages: unary(authorize, async (req: WireGcImagesRequest) =>
      gcResultToProto(await c.gcImages(gcRequestFromProto(req))),
    ),
    SetNetworkPolicy: unary(authorize, (req: { id: string; egress: WireEgressPolicy | null }) => {
      if (!req.egress) throw new BerthError("invalid_request", "SetNetworkPolicy needs an egress policy");
      return status(c.setNetworkPolicy(req.id, egressFromProto(req.egress, "request")));
    }),
    ExposePort: unary(authorize, (req: { id: string; port: number }) =>
      status(c.exposePort(req.id, req.port)),
    ),
    HasCode: unary(authorize, async (req: { sha256: string }) => ({ exists: await c.hasCode(req.sha256) })),
    PutCode: putCode(c, authorize),
  };
}

interface PutCodeChunkWire {
  sha256: string;
  data: Buffer;
}

/** Client streaming: the first chunk names the archive, every chunk may carry data. */
function putCode(containers: ContainerApi, authorize: Authorize) {
  return (
    call: grpc.ServerReadableStream<PutCodeChunkWire, unknown>,
    callback: grpc.sendUnaryData<unknown>,
  ) => {
    (async () => {
      authorize(call);
      const chunks = call[Symbol.asyncIterator]() as AsyncIterator<PutCodeChunkWire>;
      const first = await chunks.next();
      if (first.done || !first.value.sha256) {
        throw new BerthError("invalid_request", "PutCode: the first message must carry sha256");
      }
      const sha256 = first.value.sha256;
      async function* data(): AsyncGenerator<Uint8Array> {
        if (first.value.data.length > 0) yield first.value.data;
        for (;;) {
          const next = await chunks.next();
          if (next.done) return;
          if (next.value.sha256 && next.value.sha256 !== sha256) {
            throw new BerthError("invalid_request", "PutCode: only the first message may carry sha256");
          }
          if (next.value.data.length > 0) yield next.value.data;
        }
      }
      await containers.putCode(sha256, data());
      return {};
    })().then(
      (res) => callback(null, res),
      (e: unknown) => callback(toGrpcError(e)),
    );
  };
}
