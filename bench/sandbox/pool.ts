// The pre-warmed sandbox side of bench/sandbox: a second `berth up` cluster
// whose agent keeps N started sandbox containers (--warm-sandboxes N), and
// the `runc run` + python reference (bench/function-latency's, per call).

import { testRootfs } from "../../test/helpers/rootfs.ts";
import type { Cleanup } from "../lib/cleanup.ts";
import { pythonBundle, runcOnce } from "../lib/functions.ts";
import { waitFor } from "../../shared/net.ts";
import type { BerthSide } from "./berth.ts";

const READY = "a pre-warmed sandbox is ready";
const GIVEN = "container started from a pre-warmed sandbox";
const FAILED = "a pre-warmed sandbox could not be given";

const count = (text: string, what: string) => text.split("\n").filter((l) => l.includes(what)).length;

/** What the pooled cluster's agent said so far: containers made ready, given, failed to give. */
export function poolCounts(side: BerthSide): {
  ready: number;
  given: number;
  failed: number;
  failures: string[];
} {
  const out = side.cluster.output();
  return {
    ready: count(out, READY),
    given: count(out, GIVEN),
    failed: count(out, FAILED),
    failures: out.split("\n").filter((l) => l.includes(FAILED)),
  };
}

/** The agent's own timing of each hand-over step (its log line's ms={...}), per step, in ms. */
export function handOverSteps(side: BerthSide): Record<string, number[]> {
  const out: Record<string, number[]> = {};
  for (const l of side.cluster.output().split("\n")) {
    const m = l.includes(GIVEN) ? /ms=(\{[^}]*\})/.exec(l) : null;
    if (!m) continue;
    for (const [k, v] of Object.entries(JSON.parse(m[1] as string) as Record<string, number>)) {
      out[k] ??= [];
      out[k].push(v);
    }
  }
  return out;
}

/**
 * Waits (not timed) until the pool holds `size` ready containers again: every
 * container made ready was either given or still waits, and a failed
 * hand-over's container is gone, so ready - given - failed is what waits.
 */
export async function poolRefilled(side: BerthSide, size: number): Promise<void> {
  await waitFor(
    () => {
      const c = poolCounts(side);
      return c.ready - c.given - c.failed >= size || undefined;
    },
    { timeoutMs: 120_000, intervalMs: 50, what: `${size} pre-warmed sandboxes ready` },
  );
}

/** `runc run` of python3 printing a line, on the rootfs `berth up` runs as its Python image: ms to its exit. */
export async function runcReference(cleanup: Cleanup): Promise<() => Promise<number>> {
  const bundle = await pythonBundle(cleanup, await testRootfs(), "print('ready')");
  let n = 0;
  return () => runcOnce(bundle, `berth-bench-sb-${process.pid}-${n++}`);
}
