// The Python version a container really runs (the task status API's
// stub.config python_version, docs/api.md): asked of the container itself
// once — `python3`, the interpreter the runner runs — and kept per container.

import type { ContainerApi } from "../../api/index.ts";

const ARGS = ["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"];
const MAX_KEPT = 2000;

export interface ContainerExec {
  client(agentId: string): Pick<ContainerApi, "exec">;
}

export class ContainerPythonVersions {
  private readonly known = new Map<string, Promise<string | undefined>>();

  constructor(
    private readonly agents: ContainerExec,
    private readonly timeoutMs = 5000,
  ) {}

  /** "3.11"; undefined when the container is gone or has no python3 (nothing true to say). */
  of(agentId: string, containerId: string): Promise<string | undefined> {
    let p = this.known.get(containerId);
    if (!p) {
      p = this.ask(agentId, containerId);
      this.known.set(containerId, p);
      // Only an answer is kept: a container still starting is asked again next time.
      void p.then((v) => {
        if (v === undefined) this.known.delete(containerId);
      });
      if (this.known.size > MAX_KEPT) this.known.delete(this.known.keys().next().value as string);
    }
    return p;
  }

  private async ask(agentId: string, containerId: string): Promise<string | undefined> {
    try {
      const s = await this.agents.client(agentId).exec(containerId, { args: ARGS });
      const timer = setTimeout(() => s.kill("SIGKILL"), this.timeoutMs);
      let out = "";
      try {
        for await (const o of s.output)
          if (o.stream === "stdout") out += Buffer.from(o.data).toString("utf8");
        const code = await s.exit;
        const v = out.trim();
        return code === 0 && /^\d+\.\d+$/.test(v) ? v : undefined;
      } finally {
        clearTimeout(timer);
      }
    } catch {
      return undefined; // gone, stopped, or the agent unreachable: the registered version stands
    }
  }
}
