import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import { waitFor } from "../../shared/net.ts";
import { cgroupDirs } from "../../agent/runtime/cgroups.ts";
import { sharedRootfsPath } from "../../agent/runtime/idmap.ts";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { unmountLeftovers } from "../helpers/mounts.ts";
import { Runc } from "../../agent/runtime/runc.ts";
import { ContainerRuntime, type ContainerRuntimeOptions } from "../../agent/runtime/runtime.ts";
import type { ContainerEvent, ContainerSpec, LogLine } from "../../agent/runtime/types.ts";
import { loopsUnder } from "../helpers/loops.ts";
import { testRootfs } from "../helpers/rootfs.ts";

export interface Harness {
  dir: string;
  root: string;
  rootfs: string;
  rt: ContainerRuntime;
  logs: LogLine[];
  events: ContainerEvent[];
  /** A new runtime on the same root and runc root (for recovery tests). */
  make(): ContainerRuntime;
  spec(args: string[], extra?: Partial<ContainerSpec>): ContainerSpec;
  exitEvent(id: string, timeoutMs?: number): Promise<Extract<ContainerEvent, { type: "exit" }>>;
  linesOf(id: string, stream?: LogLine["stream"]): string[];
}

/** Unique per test so concurrent test files never share a cgroup path. */
export const newContainerId = () => `t-${randomBytes(5).toString("hex")}`;

/**
 * A runtime on a fresh temp root. After the test, a fresh runtime recovers
 * that root and deletes every container; then no mount may remain under the
 * temp dir and runc must know no container. A last-resort pass force-cleans
 * either way so one failure does not leak into other tests.
 */
export async function runtimeHarness(
  t: TestContext,
  opts: Partial<ContainerRuntimeOptions> = {},
): Promise<Harness> {
  const rootfs = await testRootfs();
  const dir = mkdtempSync(join(tmpdir(), "berth-rt-"));
  const root = join(dir, "containers");
  const ids = new Set<string>();
  const logs: LogLine[] = [];
  const events: ContainerEvent[] = [];
  const make = () =>
    new ContainerRuntime({
      root,
      onLog: (l) => logs.push(l),
      onEvent: (e) => events.push(e),
      pollIntervalMs: 100,
      ...opts,
    });
  const h: Harness = {
    dir,
    root,
    rootfs,
    rt: make(),
    logs,
    events,
    make,
    spec: (args, extra = {}) => {
      const spec = {
        id: newContainerId(),
        image: { rootfs },
        args,
        cpu: 1,
        memoryBytes: 256 * 1024 * 1024,
        ...extra,
      };
      ids.add(spec.id);
      return spec;
    },
    exitEvent: (id, timeoutMs = 30_000) =>
      waitFor(() => events.find((e) => e.type === "exit" && e.containerId === id) as never, {
        timeoutMs,
        intervalMs: 20,
        what: `exit of ${id}`,
      }),
    linesOf: (id, stream = "stdout") =>
      logs.filter((l) => l.containerId === id && l.stream === stream).map((l) => l.line),
  };
  t.after(async () => {
    const runc = new Runc("runc", join(root, ".runc"));
    try {
      h.rt.close();
      const cleaner = new ContainerRuntime({ root });
      await cleaner.recover();
      for (const c of cleaner.list()) await cleaner.delete(c.id);
      cleaner.close();
      for (const id of ids) {
        const left = cgroupDirs(cleaner.cgroups, cleaner.cgroupsPath(id)).filter((d) => existsSync(d));
        assert.deepEqual(left, [], `no cgroup dir of ${id} may be left`);
      }
      assert.deepEqual(mountsUnder(dir), [], "no mount may be left under the test dir");
      assert.deepEqual(mountsUnder(sharedRootfsPath(root)), [], "no container root may be left mounted");
      assert.deepEqual(loopsUnder(dir), [], "no loop device (container disk) may be left");
      assert.deepEqual(await runc.list(), [], "no runc container may be left");
      for (const name of ["crun", "runsc"] as const) {
        const other = new Runc(name, join(root, `.${name}`));
        if (existsSync(other.root))
          assert.deepEqual(await other.list(), [], `no ${name} container may be left`);
      }
    } finally {
      for (const c of await runc.list().catch(() => [])) {
        execFileSync("runc", ["--root", join(root, ".runc"), "delete", "--force", c.id], { stdio: "ignore" });
      }
      unmountLeftovers([dir], [root]);
      rmSync(dir, { recursive: true, force: true });
    }
  });
  return h;
}

/** python3 -c with a script, unbuffered so log lines arrive as printed. */
export const py = (script: string) => ["python3", "-u", "-c", script];
