// A SandboxProcessApi that hands every call to the part that keeps the
// processes. The agent's ContainerHost (its ProcessTable, through
// agent/host/sandbox.ts) and AgentRpcClient (its ProcessRpcClient,
// api/grpc/client.ts) both extend it, so the two pass the calls on alike.

import { BerthError } from "../shared/errors.ts";
import type { ExecRequest } from "./containers.ts";
import type {
  OutputStream,
  ProcessInfo,
  ProcessOutput,
  ProcessRunEvent,
  SandboxProcessApi,
} from "./processes.ts";

export abstract class ProcessDelegation implements SandboxProcessApi {
  protected abstract readonly processes: SandboxProcessApi;

  startProcess(id: string, req: ExecRequest): Promise<ProcessInfo> {
    return this.processes.startProcess(id, req);
  }

  listProcesses(id: string): Promise<ProcessInfo[]> {
    return this.processes.listProcesses(id);
  }

  getProcess(id: string, pid: number): Promise<ProcessInfo> {
    return this.processes.getProcess(id, pid);
  }

  writeProcessStdin(id: string, pid: number, data: Uint8Array, opts?: { eof?: boolean }): Promise<void> {
    return this.processes.writeProcessStdin(id, pid, data, opts);
  }

  killProcess(id: string, pid: number, signal?: NodeJS.Signals): Promise<void> {
    return this.processes.killProcess(id, pid, signal);
  }

  waitProcess(
    id: string,
    pid: number,
    opts?: { timeoutMs?: number; signal?: AbortSignal },
  ): Promise<ProcessInfo> {
    return this.processes.waitProcess(id, pid, opts);
  }

  readProcessOutput(id: string, pid: number, stream: OutputStream, offset: number): Promise<ProcessOutput> {
    return this.processes.readProcessOutput(id, pid, stream, offset);
  }

  followProcessOutput(
    id: string,
    pid: number,
    stream: OutputStream,
    offset: number,
    opts?: { signal?: AbortSignal },
  ): AsyncIterable<Uint8Array> {
    return this.processes.followProcessOutput(id, pid, stream, offset, opts);
  }

  runProcess(id: string, req: ExecRequest, opts?: { signal?: AbortSignal }): AsyncIterable<ProcessRunEvent> {
    const run = this.processes.runProcess;
    if (!run)
      throw new BerthError("not_implemented", "this agent cannot run a process in one call (RunProcess)");
    return run.call(this.processes, id, req, opts);
  }
}
