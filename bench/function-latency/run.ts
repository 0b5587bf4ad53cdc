// .remote() latency: warm (a container is up) and cold (none is), on a
// `berth up` cluster, against a local multiprocessing.Pool doing the same call
// and one `runc run` + python per call (the one-container-per-call design).
// Usage: node --import tsx bench/function-latency/run.ts [--warm N] [--cold N] [--runc N]
import { parseArgs } from "node:util";
import { Cleanup } from "../lib/cleanup.ts";
import { pythonBundle, runcOnce, startBenchCluster } from "../lib/functions.ts";
import { machineInfo } from "../lib/machine.ts";
import { fmtMs, fmtRatio, formatTable, summarize, writeResults } from "../lib/stats.ts";

const TARGETS = { warmP50Ms: 5, coldP50Ms: 150 };

async function main() {
  const { values } = parseArgs({
    options: {
      warm: { type: "string", default: "300" },
      cold: { type: "string", default: "10" },
      runc: { type: "string", default: "20" },
    },
  });
  const [nWarm, nCold, nRunc] = [Number(values.warm), Number(values.cold), Number(values.runc)];
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const cluster = await startBenchCluster(cleanup);
    const warm = await cluster.app<{ samples_ms: number[] }>("warm", [nWarm]);
    const cold = await cluster.app<{ samples_ms: number[] }>("cold", [nCold, 4]);
    const poolWarm = await cluster.app<{ samples_ms: number[] }>("pool-warm", [nWarm]);
    const poolCold = await cluster.app<{ samples_ms: number[] }>("pool-cold", [nCold]);
    const bundle = await pythonBundle(cleanup, cluster.rootfs, "print(7)");
    const runc: number[] = [];
    for (let i = 0; i < nRunc; i++) runc.push(await runcOnce(bundle, `berth-bench-fl-${process.pid}-${i}`));

    const rows = {
      "berth warm .remote()": summarize(warm.samples_ms),
      "berth cold .remote()": summarize(cold.samples_ms),
      "multiprocessing.Pool apply (warm)": summarize(poolWarm.samples_ms),
      "multiprocessing.Pool(1) + apply (cold)": summarize(poolCold.samples_ms),
      "runc run + python per call": summarize(runc),
    };
    const ref = rows["runc run + python per call"];
    console.log(
      formatTable(
        ["what", "n", "p50 ms", "p95 ms", "p50 vs runc+python"],
        Object.entries(rows).map(([k, s]) => [
          k,
          String(s.n),
          fmtMs(s.p50),
          fmtMs(s.p95),
          fmtRatio(s.p50, ref.p50),
        ]),
      ),
    );
    const verdict = {
      warmP50Ms: rows["berth warm .remote()"].p50,
      coldP50Ms: rows["berth cold .remote()"].p50,
      warmMeetsTarget: rows["berth warm .remote()"].p50 <= TARGETS.warmP50Ms,
      coldMeetsTarget: rows["berth cold .remote()"].p50 <= TARGETS.coldP50Ms,
    };
    console.log(
      `targets: warm p50 <= ${TARGETS.warmP50Ms} ms: ${verdict.warmMeetsTarget ? "met" : "NOT met"}; cold p50 <= ${TARGETS.coldP50Ms} ms: ${verdict.coldMeetsTarget ? "met" : "NOT met"}`,
    );
    const path = writeResults("function-latency", {
      machine,
      targets: TARGETS,
      verdict,
      summaries: rows,
      samples: {
        warm: warm.samples_ms,
        cold: cold.samples_ms,
        poolWarm: poolWarm.samples_ms,
        poolCold: poolCold.samples_ms,
        runc,
      },
    });
    console.log(`results: ${path}`);
  } finally {
    await cleanup.run();
  }
}

await main();
