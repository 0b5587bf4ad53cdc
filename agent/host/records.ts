// The host's own per-container record (root/<id>.json): what the runtime
// does not know (image, GPUs, network, the request minus credentials), so a
// restarted agent can rebuild allocations and answer getContainer.

import { mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { EgressPolicy } from "../../shared/egress.ts";

export interface HostRecord {
  version: 1;
  id: string;
  image: string;
  imageDigest: string;
  cpu: number;
  memoryBytes: number;
  gpus: string[];
  egress: EgressPolicy;
  exposedPorts: number[];
  ipv4?: string;
  ipv6?: string;
  labels: Record<string, string>;
  /** The request as resolved, without credentials: for operators and debugging. */
  request: {
    args: string[];
    env: Record<string, string>;
    cwd?: string;
    user?: { uid: number; gid: number };
    hostname?: string;
    pidsLimit?: number;
    gpu?: { count: number; types?: string[] };
    mounts: { source: string; destination: string; readOnly: boolean }[];
    timeoutMs?: number;
  };
  /** Set when stopContainer (without remove) or the container's own exit released its resources. */
  released?: boolean;
}

const RECORD_SUFFIX = ".json";

export class HostRecords {
  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
  }

  path(id: string): string {
    return join(this.dir, `${id}${RECORD_SUFFIX}`);
  }

  /** Write to a temp file and rename, so a crash leaves the old record or the new one. */
  write(r: HostRecord): void {
    const tmp = `${this.path(r.id)}.tmp`;
    writeFileSync(tmp, `${JSON.stringify(r, null, 2)}\n`, { mode: 0o600 });
    renameSync(tmp, this.path(r.id));
  }

  remove(id: string): void {
    rmSync(this.path(id), { force: true });
  }

  readAll(): HostRecord[] {
    const out: HostRecord[] = [];
    for (const name of readdirSync(this.dir)) {
      if (!name.endsWith(RECORD_SUFFIX)) continue;
      try {
        const r = JSON.parse(readFileSync(join(this.dir, name), "utf8")) as HostRecord;
        if (r.version === 1 && typeof r.id === "string") out.push(r);
      } catch {
        // A torn temp file is never named *.json; an unreadable record is skipped (and reported by the caller).
      }
    }
    return out;
  }
}
