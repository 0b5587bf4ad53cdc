// .remote() latency: warm (a container is up) and cold (none is), on a
// `berth up` cluster, against a local multiprocessing.Pool doing the same call
// and one `runc run` + python per call (the one-container-per-call design).
// With --warm-runners N, a second cluster whose agent keeps N pre-warmed
// runners (docs/runtime.md) runs beside the first; cold calls on both and
// runc + python are then measured in alternating rounds.
// Usage: node --import tsx bench/function-latency/run.ts [--warm N] [--cold N] [--runc N] [--warm-runners N]
import { parseArgs } from "node:util";
import { Cleanup } from "../lib/cleanup.ts";
import { pythonBundle, runcOnce, startBenchCluster } from "../lib/functions.ts";
import { machineInfo } from "../lib/machine.ts";
import { fmtMs, fmtRatio, formatTable, summarize, writeResults } from "../lib/stats.ts";

// coldPooledVsRunc: a cold call with pre-warmed runners at most this many times runc + python.
const TARGETS = { warmP50Ms: 5, coldP50Ms: 150, coldPooledVsRunc: 1.5 };

async function main() {
  const { values } = parseArgs({
    options: {
      warm: { type: "string", default: "300" },
      cold: { type: "string", default: "10" },
      runc: { type: "string", default: "20" },
      "warm-runners": { type: "string", default: "0" },
    },
  });
  const [nWarm, nCold, nRunc] = [Number(values.warm), Number(values.cold), Number(values.runc)];
  const warmRunners = Number(values["warm-runners"]);
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const cluster = await startBenchCluster(cleanup);
    const pooled =
      warmRunners > 0 ? await startBenchCluster(cleanup, { warmRunners, second: true }) : undefined;
    const warm = await cluster.app<{ samples_ms: number[] }>("warm", [nWarm]);
    const poolWarm = await cluster.app<{ samples_ms: number[] }>("pool-warm", [nWarm]);
    const poolCold = await cluster.app<{ samples_ms: number[] }>("pool-cold", [nCold]);
    const bundle = await pythonBundle(cleanup, cluster.rootfs, "print(7)");
    const cold = { samples_ms: [] as number[] };
    const coldPooled: number[] = [];
    const runc: number[] = [];
    // Rounds alternate the targets, so the machine's drift (2 shared cores) falls on all of them.
    const rounds = pooled ? Math.max(1, Math.ceil(nCold / 5)) : 1;
    const per = (n: number, r: number) => Math.floor(n / rounds) + (r < n % rounds ? 1 : 0);
    for (let r = 0; r < rounds; r++) {
      cold.samples_ms.push(
        ...(await cluster.app<{ samples_ms: number[] }>("cold", [per(nCold, r), 4])).samples_ms,
      );
      if (pooled)
        coldPooled.push(
          ...(await pooled.app<{ samples_ms: number[] }>("cold", [per(nCold, r), 4])).samples_ms,
        );
      for (let i = 0; i < per(nRunc, r); i++)
        runc.push(await runcOnce(bundle, `berth-bench-fl-${process.pid}-${runc.length}`));
    }

    const warmS = summarize(warm.samples_ms);
    const coldS = summarize(cold.samples_ms);
    const coldPooledS = pooled ? summarize(coldPooled) : undefined;
    const ref = summarize(runc);
    const rows: Record<string, ReturnType<typeof summarize>> = {
      "berth warm .remote()": warmS,
      "berth cold .remote()": coldS,
      ...(coldPooledS ? { [`berth cold .remote(), ${warmRunners} pre-warmed runners`]: coldPooledS } : {}),
      "multiprocessing.Pool apply (warm)": summarize(poolWarm.samples_ms),
      "multiprocessing.Pool(1) + apply (cold)": summarize(poolCold.samples_ms),
      "runc run + python per call": ref,
    };
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
      warmP50Ms: warmS.p50,
      coldP50Ms: coldS.p50,
      warmMeetsTarget: warmS.p50 <= TARGETS.warmP50Ms,
      coldMeetsTarget: coldS.p50 <= TARGETS.coldP50Ms,
      ...(coldPooledS
        ? {
            coldPooledP50Ms: coldPooledS.p50,
            coldVsRunc: coldS.p50 / ref.p50,
            coldPooledVsRunc: coldPooledS.p50 / ref.p50,
            coldPooledMeetsTarget: coldPooledS.p50 <= TARGETS.coldPooledVsRunc * ref.p50,
          }
        : {}),
    };
    console.log(
      `targets: warm p50 <= ${TARGETS.warmP50Ms} ms: ${verdict.warmMeetsTarget ? "met" : "NOT met"}; cold p50 <= ${TARGETS.coldP50Ms} ms: ${verdict.coldMeetsTarget ? "met" : "NOT met"}`,
    );
    if (pooled) {
      const given = pooled
        .output()
        .split("\n")
        .filter((l) => l.includes("started from a pre-warmed runner"));
      const failed = pooled
        .output()
        .split("\n")
        .filter((l) => l.includes("could not be given"));
      console.log(`pre-warmed runners given: ${given.length}; failed to give: ${failed.length}`);
      for (const l of failed.slice(0, 3)) console.log(`  ${l}`);
    }
    if (coldPooledS) {
      console.log(
        `target: cold p50 with pre-warmed runners <= ${TARGETS.coldPooledVsRunc}x runc + python: ${verdict.coldPooledMeetsTarget ? "met" : "NOT met"} (${fmtRatio(coldPooledS.p50, ref.p50)}; without: ${fmtRatio(coldS.p50, ref.p50)})`,
      );
    }
    const path = writeResults("function-latency", {
      machine,
      targets: TARGETS,
      verdict,
      summaries: rows,
      samples: {
        warm: warm.samples_ms,
        cold: cold.samples_ms,
        ...(pooled ? { coldPooled, warmRunners } : {}),
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
