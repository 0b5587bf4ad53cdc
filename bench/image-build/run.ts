// Image builds: one Dockerfile (FROM a local registry image, then RUN, COPY
// and ENV steps) built cold and rebuilt from cache by a `berth up` cluster
// (through the Python SDK, the coordinator and the agent's builder, as
// .remote() and berth deploy build) and by `buildah bud --layers` of the same
// Dockerfile and context, in the same run, interleaved. Cold: every step runs
// (a new ENV value at the top changes every step's cache key on both sides);
// the base is already local to both (pulled once, not measured). Cached: the
// same Dockerfile again, every step from cache. Then cold .remote() calls of
// a function on the built image against one on the default image.
// Targets: cached rebuild <= 1 s; cold build within 1.2x of buildah.
// Usage: node --import tsx bench/image-build/run.ts [--rounds 5] [--cold 5]
import { cpSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { startTestRegistry } from "../../test/helpers/registry.ts";
import { pushTestImage } from "../../test/helpers/test-image.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir } from "../lib/fs.ts";
import { startBenchCluster } from "../lib/functions.ts";
import { machineInfo, toolVersion } from "../lib/machine.ts";
import { exec } from "../lib/proc.ts";
import { fmtMs, fmtRatio, formatTable, type Summary, summarize, writeResults } from "../lib/stats.ts";

const SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));
const APP = fileURLToPath(new URL("./app.py", import.meta.url));
const TARGETS = { cachedRebuildS: 1, coldVsBuildah: 1.2 };

/** The build context: a small Python package the Dockerfile copies and byte-compiles. */
function writeContext(dir: string, round: string, base: string): void {
  mkdirSync(join(dir, "src", "pkg"), { recursive: true });
  for (let i = 0; i < 20; i++) {
    writeFileSync(join(dir, "src", "pkg", `mod${i}.py`), `VALUE = ${i}\n\ndef f(x):\n    return x + VALUE\n`);
  }
  writeFileSync(join(dir, "src", "pkg", "__init__.py"), "");
  writeFileSync(
    join(dir, "Dockerfile"),
    [
      `FROM ${base}`,
      `ENV BENCH_ROUND=${round}`,
      "RUN mkdir -p /opt/app && echo one > /opt/app/one.txt",
      "COPY src /opt/app/src",
      "RUN python3 -m compileall -q /opt/app/src",
      "ENV GREETING=hello",
      'RUN echo "$GREETING" > /opt/app/greeting.txt',
      "",
    ].join("\n"),
  );
}

async function main() {
  const { values } = parseArgs({
    options: { rounds: { type: "string", default: "5" }, cold: { type: "string", default: "5" } },
  });
  const rounds = Number(values.rounds);
  const nCold = Number(values.cold);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error("--rounds must be a positive integer");
  if (!Number.isInteger(nCold) || nCold < 0) throw new Error("--cold must be an integer >= 0");
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const buildahVersion = await toolVersion("buildah");
    if (!buildahVersion)
      throw new Error("buildah is not installed: run `bash scripts/bench-deps.sh` as root");
    const registry = await startTestRegistry({
      after: (fn) => cleanup.add("stop the registry", async () => void (await fn())),
    });
    const base = await pushTestImage(registry, "bench/python", "bookworm");
    const cluster = await startBenchCluster(cleanup);
    const work = benchTempDir(cleanup, "berth-bench-image-build-");
    const buildahRoot = join(work, "buildah");
    const storage = ["--root", join(buildahRoot, "root"), "--runroot", join(buildahRoot, "run")];
    cleanup.add("remove buildah's containers and images", async () => {
      await exec("buildah", [...storage, "rm", "--all"]);
      await exec("buildah", [...storage, "rmi", "--all", "--force"]);
      await exec("umount", ["-R", join(buildahRoot, "root", "overlay")]);
    });
    const appDir = join(work, "app");
    mkdirSync(appDir);
    cpSync(APP, join(appDir, "app.py"));

    const berthBuild = async (ctx: string) => {
      const r = await exec("python3", ["app.py", "build"], {
        env: {
          ...process.env,
          PYTHONPATH: SDK_DIR,
          SERVICE_TOKEN: cluster.token,
          BERTH_URL: cluster.url,
          BENCH_CONTEXT: ctx,
        },
        timeoutMs: 900_000,
        cwd: appDir,
      });
      if (r.code !== 0) throw new Error(`berth build failed (${r.code}): ${r.stderr.slice(-3000)}`);
      return JSON.parse(r.stdout.trim().split("\n").pop() as string) as {
        seconds: number;
        steps_seconds: number;
        cached: number;
        built: number;
      };
    };
    const buildahBuild = async (ctx: string, tag: string) => {
      const args = [...storage, "bud", "--layers", "--tls-verify=false", "--quiet", "-t", tag, ctx];
      const r = await exec("buildah", args, { timeoutMs: 900_000 });
      if (r.code !== 0) throw new Error(`buildah bud failed (${r.code}): ${r.stderr.slice(-3000)}`);
      return r.ms / 1000;
    };

    // The base, local to both sides (not measured): one build of a throwaway round each.
    const warmCtx = join(work, "ctx-warm");
    writeContext(warmCtx, "warm", base);
    await berthBuild(warmCtx);
    await buildahBuild(warmCtx, "bench-warm");

    const samples: Record<string, number[]> = {
      "berth cold": [],
      "buildah cold": [],
      "berth cached": [],
      "berth cold, steps only": [],
      "buildah cached": [],
    };
    const steps: { round: number; coldBuilt: number; cachedCached: number }[] = [];
    let lastCtx = warmCtx;
    for (let i = 0; i < rounds; i++) {
      const ctx = join(work, `ctx-${i}`);
      writeContext(ctx, `${process.pid}-${i}`, base);
      lastCtx = ctx;
      const sides = i % 2 === 0 ? (["berth", "buildah"] as const) : (["buildah", "berth"] as const);
      for (const side of sides) {
        if (side === "berth") {
          const cold = await berthBuild(ctx);
          const cached = await berthBuild(ctx);
          if (cached.built !== 0) throw new Error(`berth's rebuild ran ${cached.built} steps`);
          samples["berth cold"]!.push(cold.seconds);
          samples["berth cold, steps only"]!.push(cold.steps_seconds);
          samples["berth cached"]!.push(cached.seconds);
          steps.push({ round: i, coldBuilt: cold.built, cachedCached: cached.cached });
        } else {
          samples["buildah cold"]!.push(await buildahBuild(ctx, `bench-${i}`));
          samples["buildah cached"]!.push(await buildahBuild(ctx, `bench-${i}`));
        }
      }
      console.log(`round ${i + 1}/${rounds} done`);
    }

    const s: Record<string, Summary> = Object.fromEntries(
      Object.entries(samples).map(([k, v]) => [k, summarize(v)]),
    );
    const sec = (x: number | undefined) => (x === undefined ? "-" : x.toFixed(2));
    console.log(
      formatTable(
        ["build", "n", "p50 s", "p95 s", "p50 vs buildah"],
        // "steps only": until berth's last step ended, before the push to the cluster registry.
        (
          ["berth cold", "berth cold, steps only", "buildah cold", "berth cached", "buildah cached"] as const
        ).map((row) => {
          const x = s[row]!;
          const ref = s[row.includes("cold") ? "buildah cold" : "buildah cached"]!;
          return [row, String(x.n), sec(x.p50), sec(x.p95), fmtRatio(x.p50, ref.p50)];
        }),
      ),
    );

    let cold: { built: Summary; default: Summary } | undefined;
    let coldRaw: { built: number[]; default: number[] } | undefined;
    if (nCold > 0) {
      const r = await exec("python3", ["app.py", "cold", String(nCold), "4"], {
        env: {
          ...process.env,
          PYTHONPATH: SDK_DIR,
          SERVICE_TOKEN: cluster.token,
          BERTH_URL: cluster.url,
          BENCH_CONTEXT: lastCtx,
        },
        timeoutMs: 900_000,
        cwd: appDir,
      });
      if (r.code !== 0) throw new Error(`cold .remote() failed (${r.code}): ${r.stderr.slice(-3000)}`);
      coldRaw = (JSON.parse(r.stdout.trim().split("\n").pop() as string) as { samples_ms: typeof coldRaw })
        .samples_ms;
      if (!coldRaw) throw new Error("cold .remote() printed no samples");
      cold = { built: summarize(coldRaw.built), default: summarize(coldRaw.default) };
      console.log(
        formatTable(
          ["cold .remote()", "n", "p50 ms", "p95 ms", "p50 vs default image"],
          (["built", "default"] as const).map((k) => [
            `${k} image`,
            String(cold![k].n),
            fmtMs(cold![k].p50),
            fmtMs(cold![k].p95),
            fmtRatio(cold![k].p50, cold!.default.p50),
          ]),
        ),
      );
    }
    const coldRatio = s["berth cold"]!.p50 / s["buildah cold"]!.p50;
    console.log(
      `targets: cached rebuild p50 ${sec(s["berth cached"]!.p50)} s (<= ${TARGETS.cachedRebuildS} s: ${s["berth cached"]!.p50 <= TARGETS.cachedRebuildS ? "met" : "NOT met"}); ` +
        `cold build ${coldRatio.toFixed(2)}x buildah (<= ${TARGETS.coldVsBuildah}x: ${coldRatio <= TARGETS.coldVsBuildah ? "met" : "NOT met"})`,
    );
    const path = writeResults("image-build", {
      machine,
      tools: { buildah: buildahVersion },
      rounds,
      targets: TARGETS,
      samplesS: samples,
      summaryS: s,
      steps,
      coldRemoteMs: coldRaw ? { samples: coldRaw, summary: cold } : undefined,
    });
    console.log(`results: ${path}`);
  } finally {
    await cleanup.run();
  }
}

await main();
