// .map() throughput over trivial inputs on a `berth up` cluster, against a
// local multiprocessing.Pool(2).map and one `runc run` + python per item
// (two at a time, one per core).
// Usage: node --import tsx bench/map-throughput/run.ts [--sizes 1000,10000] [--runc N] [--log FILE]
// --log: where to write `berth up`'s output (the coordinator's and agent's logs) at the end.
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Cleanup } from "../lib/cleanup.ts";
import { pythonBundle, runcOnce, startBenchCluster } from "../lib/functions.ts";
import { machineInfo } from "../lib/machine.ts";
import { formatTable, writeResults } from "../lib/stats.ts";

const TARGET_TASKS_PER_S = 2000;

interface MapResult {
  items: number;
  elapsed_ms: number;
  tasks_per_s: number;
}

async function main() {
  const { values } = parseArgs({
    options: {
      sizes: { type: "string", default: "1000,10000" },
      runc: { type: "string", default: "20" },
      log: { type: "string" },
    },
  });
  const sizes = (values.sizes as string).split(",").map(Number);
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const cluster = await startBenchCluster(cleanup);
    const log = values.log;
    if (log) cleanup.add("save the cluster's log", () => writeFileSync(log, cluster.output()));
    const rows: { what: string; items: number; tasksPerS: number; elapsedMs: number }[] = [];
    for (const n of sizes) {
      const b = await cluster.app<MapResult>("map", [n]);
      // One line per map as it ends: a long run shows a stall while it goes.
      console.log(
        `${new Date().toISOString()} map ${n}: ${b.tasks_per_s.toFixed(0)} tasks/s, ${b.elapsed_ms.toFixed(0)} ms`,
      );
      rows.push({ what: "berth .map()", items: n, tasksPerS: b.tasks_per_s, elapsedMs: b.elapsed_ms });
      const p = await cluster.app<MapResult>("pool-map", [n]);
      rows.push({
        what: "multiprocessing.Pool(2).map",
        items: n,
        tasksPerS: p.tasks_per_s,
        elapsedMs: p.elapsed_ms,
      });
    }
    // One container per item, two in parallel: measured on a sample, as tasks/s.
    const bundle = await pythonBundle(cleanup, cluster.rootfs, "print(7)");
    const nRunc = Number(values.runc);
    const t0 = performance.now();
    await Promise.all(
      [0, 1].map(async (lane) => {
        for (let i = lane; i < nRunc; i += 2) await runcOnce(bundle, `berth-bench-mt-${process.pid}-${i}`);
      }),
    );
    const runcMs = performance.now() - t0;
    rows.push({
      what: "runc run + python per item (x2)",
      items: nRunc,
      tasksPerS: nRunc / (runcMs / 1000),
      elapsedMs: runcMs,
    });

    console.log(
      formatTable(
        ["what", "items", "tasks/s", "elapsed ms"],
        rows.map((r) => [r.what, String(r.items), r.tasksPerS.toFixed(0), r.elapsedMs.toFixed(0)]),
      ),
    );
    const berth = rows.filter((r) => r.what === "berth .map()");
    const met = berth.every((r) => r.tasksPerS >= TARGET_TASKS_PER_S);
    console.log(`target: .map() >= ${TARGET_TASKS_PER_S} tasks/s: ${met ? "met" : "NOT met"}`);
    const path = writeResults("map-throughput", { machine, targetTasksPerS: TARGET_TASKS_PER_S, met, rows });
    console.log(`results: ${path}`);
  } finally {
    await cleanup.run();
  }
}

await main();
