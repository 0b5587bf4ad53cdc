// Server side of the sandbox process RPCs: decode, call the agent's process
// table, encode. A cancelled FollowProcessOutput stops following; a
// cancelled WaitProcess stops waiting (the process runs on).

import type * as grpc from "@grpc/grpc-js";
import type { OutputStream, SandboxProcessApi } from "../../api/index.ts";
import {
  execRequestFromProto,
  processInfoToProto,
  runEventToProto,
  toGrpcError,
  type WireExecRequest,
} from "../../api/grpc/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { type Authorize, hasMethods, refusingHandlers, serverStream, unary } from "./container-handlers.ts";
import { ProcessChannels, processChannel } from "./process-channel.ts";

const PROCESS_METHODS = [
  "startProcess",
  "listProcesses",
  "getProcess",
  "writeProcessStdin",
  "killProcess",
  "waitProcess",
  "readProcessOutput",
  "followProcessOutput",
] as const satisfies readonly (keyof SandboxProcessApi)[];

/** Whether `x` (a ContainerApi, say) keeps sandbox processes too, as ContainerHost does. */
export function isProcessApi(x: unknown): x is SandboxProcessApi {
  return hasMethods(x, PROCESS_METHODS);
}

interface Ref {
  containerId: string;
  pid: number;
}

interface OutputWire extends Ref {
  stream: string;
  offset: number;
}

function notServed(): BerthError {
  return new BerthError(
    "not_implemented",
    "this agent does not keep sandbox processes (it was started without a container host)",
  );
}

function signalOf(name: string): NodeJS.Signals | undefined {
  if (name === "") return undefined;
  if (!/^SIG[A-Z0-9]+$/.test(name))
    throw new BerthError("invalid_request", `unknown signal ${JSON.stringify(name)}`);
  return name as NodeJS.Signals;
}

function waitProcess(impl: SandboxProcessApi, authorize: Authorize): grpc.handleUnaryCall<unknown, unknown> {
  return (call, callback) => {
    const abort = new AbortController();
    call.on("cancelled", () => abort.abort());
    (async () => {
      authorize(call);
      const r = call.request as Ref & { timeoutMs?: number | null };
      const timeoutMs = r.timeoutMs ?? undefined;
      const info = await impl.waitProcess(r.containerId, r.pid, {
        ...(timeoutMs !== undefined ? { timeoutMs } : {}),
        signal: abort.signal,
      });
      return processInfoToProto(info);
    })().then(
      (res) => callback(null, res),
      (e: unknown) => callback(toGrpcError(e)),
    );
  };
}

function followOutput(impl: SandboxProcessApi, authorize: Authorize) {
  return serverStream(
    authorize,
    ({ containerId, pid, stream, offset }: OutputWire, signal) =>
      impl.followProcessOutput(containerId, pid, stream as OutputStream, offset, { signal }),
    (chunk: Uint8Array) => ({ data: Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength) }),
  );
}

/**
 * The process RPC handlers; every one refuses with not_implemented when
 * `impl` is absent. `channels`: the server's open process channels, drained
 * when it stops.
 */
export function processHandlers(
  impl: SandboxProcessApi | undefined,
  authorize: Authorize,
  channels = new ProcessChannels(),
): grpc.UntypedServiceImplementation {
  if (!impl) {
    return refusingHandlers(authorize, notServed, {
      unary: [
        "StartProcess",
        "ListProcesses",
        "GetProcess",
        "WriteProcessStdin",
        "KillProcess",
        "WaitProcess",
        "ReadProcessOutput",
      ],
      stream: ["FollowProcessOutput", "RunProcess", "ProcessChannel"],
    });
  }
  const c = impl;
  return {
    StartProcess: unary(authorize, async (r: { containerId: string; request: WireExecRequest | null }) =>
      processInfoToProto(await c.startProcess(r.containerId, execRequestFromProto(r.request))),
    ),
    ListProcesses: unary(authorize, async (r: { containerId: string }) => ({
      processes: (await c.listProcesses(r.containerId)).map(processInfoToProto),
    })),
    GetProcess: unary(authorize, async (r: Ref) =>
      processInfoToProto(await c.getProcess(r.containerId, r.pid)),
    ),
    WriteProcessStdin: unary(authorize, async (r: Ref & { data: Buffer; eof: boolean }) => {
      await c.writeProcessStdin(r.containerId, r.pid, r.data, { eof: r.eof });
      return {};
    }),
    KillProcess: unary(authorize, async (r: Ref & { signal: string }) => {
      await c.killProcess(r.containerId, r.pid, signalOf(r.signal));
      return {};
    }),
    WaitProcess: waitProcess(c, authorize),
    ReadProcessOutput: unary(authorize, async (r: OutputWire) => {
      const o = await c.readProcessOutput(r.containerId, r.pid, r.stream as OutputStream, r.offset);
      return { start: o.start, offset: o.offset, data: Buffer.from(o.data) };
    }),
    FollowProcessOutput: followOutput(c, authorize),
    ProcessChannel: processChannel(c, authorize, channels),
    RunProcess: serverStream(
      authorize,
      (r: { containerId: string; request: WireExecRequest | null }, signal) => {
        if (!c.runProcess) throw notServed();
        return c.runProcess(r.containerId, execRequestFromProto(r.request), { signal });
      },
      runEventToProto,
    ),
  };
}
