// The shared fake agent's sandbox processes (test/helpers/fake-container-api.ts):
// each call recorded, then the agent's own ProcessTable
// (agent/sandboxes/processes.ts) over the fake's exec, as ContainerHost does.

import type {
  ExecRequest,
  OutputStream,
  ProcessInfo,
  ProcessOutput,
  ProcessRunEvent,
  SandboxProcessApi,
} from "../../api/index.ts";
import type { ProcessTable } from "../../agent/sandboxes/processes.ts";

export abstract class FakeProcesses implements SandboxProcessApi {
  abstract readonly processes: ProcessTable;
  protected abstract record(method: string, ...args: unknown[]): void;

  async startProcess(id: string, req: ExecRequest): Promise<ProcessInfo> {
    this.record("startProcess", id, req);
    return this.processes.startProcess(id, req);
  }
  async listProcesses(id: string): Promise<ProcessInfo[]> {
    this.record("listProcesses", id);
    return this.processes.listProcesses(id);
  }
  async getProcess(id: string, pid: number): Promise<ProcessInfo> {
    this.record("getProcess", id, pid);
    return this.processes.getProcess(id, pid);
  }
  async writeProcessStdin(
    id: string,
    pid: number,
    data: Uint8Array,
    opts?: { eof?: boolean },
  ): Promise<void> {
    this.record("writeProcessStdin", id, pid, opts);
    return this.processes.writeProcessStdin(id, pid, data, opts);
  }
  async killProcess(id: string, pid: number, signal?: NodeJS.Signals): Promise<void> {
    this.record("killProcess", id, pid, signal);
    return this.processes.killProcess(id, pid, signal);
  }
  async waitProcess(
    id: string,
    pid: number,
    opts?: { timeoutMs?: number; signal?: AbortSignal },
  ): Promise<ProcessInfo> {
    this.record("waitProcess", id, pid, { timeoutMs: opts?.timeoutMs });
    return this.processes.waitProcess(id, pid, opts);
  }
  async readProcessOutput(
    id: string,
    pid: number,
    stream: OutputStream,
    offset: number,
  ): Promise<ProcessOutput> {
    this.record("readProcessOutput", id, pid, stream, offset);
    return this.processes.readProcessOutput(id, pid, stream, offset);
  }
  async *followProcessOutput(
    id: string,
    pid: number,
    stream: OutputStream,
    offset: number,
    opts?: { signal?: AbortSignal },
  ): AsyncIterable<Uint8Array> {
    this.record("followProcessOutput", id, pid, stream, offset);
    yield* this.processes.followProcessOutput(id, pid, stream, offset, opts);
  }
  async *runProcess(
    id: string,
    req: ExecRequest,
    opts?: { signal?: AbortSignal },
  ): AsyncIterable<ProcessRunEvent> {
    this.record("runProcess", id, req);
    yield* this.processes.runProcess(id, req, opts);
  }
}
