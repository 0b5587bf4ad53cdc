// Sandboxes: create → first exec output, exec round trip on
// a warm sandbox and a 100 MB upload, through the Python SDK against a
// `berth up` cluster, interleaved with `podman run` / `podman exec` /
// `podman cp` on the same image in the same run. The exec is also timed as
// the three requests it took before `processes/run` (exec, wait, output),
// interleaved, for before/after in one run. Create → first output is also
// compared with `runc run` + python per call (bench/function-latency's
// reference); with --warm-sandboxes N a second cluster, whose agent keeps N
// pre-warmed sandboxes, is timed in the same rounds (the pool refilled,
// untimed, before and after each of its creates).
// Usage: node --import tsx bench/sandbox/run.ts [--iterations 20] [--warmup 2] [--uploads 5] [--upload-mb 100]
//   [--warm-sandboxes N] [--out NAME] [--log FILE]
import { randomBytes } from "node:crypto";
import { closeSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { TEST_IMAGE_TAG, testImageLayout } from "../../test/helpers/test-image.ts";
import { CONTAINER_ARGS, READY_LINE } from "../container-start/contender.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir } from "../lib/fs.ts";
import { machineInfo, toolVersion } from "../lib/machine.ts";
import { fmtMs, fmtRatio, formatTable, type Summary, summarize, writeResults } from "../lib/stats.ts";
import { BerthSide, type CreateSample, type ExecSample, type HttpTiming } from "./berth.ts";
import { createBreakdown } from "./breakdown.ts";
import { PodmanReference } from "./podman.ts";
import { handOverSteps, poolCounts, poolRefilled, runcReference } from "./pool.ts";

// createPooledVsRunc: create → first output with pre-warmed sandboxes, at most this many times runc + python.
const TARGETS = { createToFirstOutputP50Ms: 200, execRoundTripP50Ms: 10, createPooledVsRunc: 1.5 };
const UPLOAD_DEST = "/root/bench-upload.bin";

function positiveInt(name: string, value: string | undefined, min: number): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < min)
    throw new Error(`--${name} must be an integer >= ${min}, not ${value}`);
  return n;
}

/** A file of `mb` MiB of random bytes. */
function randomFile(path: string, mb: number): number {
  const fd = openSync(path, "w");
  try {
    for (let i = 0; i < mb; i++) writeSync(fd, randomBytes(1 << 20));
  } finally {
    closeSync(fd);
  }
  return mb << 20;
}

/** "POST /sandboxes/{id}/processes/{pid}/wait" from the concrete route. */
const routeShape = (req: string) =>
  req.replace(/ctr-[0-9a-f]+/g, "{id}").replace(/\/processes\/\d+/g, "/processes/{pid}");

/** Per request shape: median ms (p50 over samples), in the order the requests were sent. */
function httpMedians(samples: { http: HttpTiming[] }[]): Record<string, Summary> {
  const by = new Map<string, number[]>();
  for (const s of samples)
    for (const h of s.http) {
      const key = routeShape(h.req);
      if (!by.has(key)) by.set(key, []);
      by.get(key)?.push(h.ms);
    }
  return Object.fromEntries([...by].map(([k, v]) => [k, summarize(v)]));
}

async function main() {
  const { values } = parseArgs({
    options: {
      iterations: { type: "string", default: "20" },
      warmup: { type: "string", default: "2" },
      uploads: { type: "string", default: "5" },
      "upload-mb": { type: "string", default: "100" },
      log: { type: "string" },
      "warm-sandboxes": { type: "string", default: "0" },
      out: { type: "string" },
    },
  });
  const warmSandboxes = Number(values["warm-sandboxes"]);
  if (!Number.isInteger(warmSandboxes) || warmSandboxes < 0 || warmSandboxes > 64)
    throw new Error(`--warm-sandboxes must be an integer 0..64, not ${values["warm-sandboxes"]}`);
  const iterations = positiveInt("iterations", values.iterations, 1);
  const warmup = positiveInt("warmup", values.warmup, 0);
  const uploads = positiveInt("uploads", values.uploads, 0);
  const uploadMb = positiveInt("upload-mb", values["upload-mb"], 1);
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const versions = {
      podman: await toolVersion("podman"),
      runc: await toolVersion("runc"),
      python3: await toolVersion("python3"),
      node: process.version,
    };
    const runId = `s${process.pid}`;
    const podman = new PodmanReference(cleanup, runId);
    await podman.setup(await testImageLayout(), TEST_IMAGE_TAG);
    const berth = await BerthSide.start(cleanup, values.log);
    const pooled =
      warmSandboxes > 0
        ? await BerthSide.start(cleanup, values.log && `${values.log}.pooled`, [
            "--warm-sandboxes",
            String(warmSandboxes),
          ])
        : undefined;
    const runc = await runcReference(cleanup);
    if (pooled) await poolRefilled(pooled, warmSandboxes);
    const file = join(benchTempDir(cleanup, "berth-bench-sandbox-"), "upload.bin");
    const uploadBytes = randomFile(file, uploadMb);

    // The warm containers the exec and upload samples use, each exec'd once.
    await berth.call({ op: "warm" });
    const idle = `${runId}-idle`;
    await podman.startIdle(idle);
    await podman.exec(idle, ["true"]);

    const create = {
      berth: [] as CreateSample[],
      podman: [] as number[],
      pooled: [] as CreateSample[],
      runc: [] as number[],
    };
    const exec = { berth: [] as ExecSample[], podman: [] as number[], berth3: [] as ExecSample[] };
    const upload = { berth: [] as number[], podman: [] as number[] };
    const startedAt = new Date().toISOString();
    console.log(`${warmup} warm-up + ${iterations} iterations, then ${uploads} uploads of ${uploadMb} MiB`);
    for (let i = 0; i < warmup + iterations && !cleanup.interrupted; i++) {
      const keep = i >= warmup;
      // Who goes first alternates, so noise and caches fall on both sides alike.
      const steps = [
        async () => {
          const s = await berth.call<CreateSample>({ op: "create", data_dir: berth.cluster.dataDir });
          if (keep) create.berth.push(s);
        },
        async () => {
          const ms = await podman.runUntilLine(CONTAINER_ARGS, READY_LINE);
          if (keep) create.podman.push(ms);
        },
        async () => {
          const s = await berth.call<ExecSample>({ op: "exec" });
          if (keep) exec.berth.push(s);
        },
        async () => {
          const r = await podman.exec(idle, ["echo", "hi"]);
          if (r.stdout !== "hi\n") throw new Error(`podman exec echo hi printed ${JSON.stringify(r.stdout)}`);
          if (keep) exec.podman.push(r.ms);
        },
        // The same exec as three requests (exec, wait, output): the SDK's way before the run route.
        async () => {
          const s = await berth.call<ExecSample>({ op: "exec", requests: "three" });
          if (keep) exec.berth3.push(s);
        },
        // The pool refilled before and after (not timed), so its refill never overlaps another sample.
        async () => {
          if (!pooled) return;
          await poolRefilled(pooled, warmSandboxes);
          const s = await pooled.call<CreateSample>({ op: "create", data_dir: pooled.cluster.dataDir });
          await poolRefilled(pooled, warmSandboxes);
          if (keep) create.pooled.push(s);
        },
        async () => {
          const ms = await runc();
          if (keep) create.runc.push(ms);
        },
      ];
      const order = i % 2 === 0 ? [0, 1, 5, 6, 2, 4, 3] : [6, 5, 1, 0, 4, 2, 3];
      for (const k of order) await (steps[k] as () => Promise<void>)();
      process.stdout.write(".");
    }
    for (let i = 0; i < uploads && !cleanup.interrupted; i++) {
      const berthUpload = async () => {
        const r = await berth.call<{ ms: number; size: number }>({ op: "upload", path: file }, 600_000);
        if (r.size !== uploadBytes) throw new Error(`berth stored ${r.size} bytes of ${uploadBytes}`);
        upload.berth.push(r.ms);
      };
      const podmanUpload = async () => upload.podman.push(await podman.copyIn(file, idle, UPLOAD_DEST));
      for (const f of i % 2 === 0 ? [berthUpload, podmanUpload] : [podmanUpload, berthUpload]) await f();
      process.stdout.write("u");
    }
    console.log("");
    if (cleanup.interrupted) {
      console.log("interrupted: no results written");
      return;
    }

    const mbps = (msList: number[]) => msList.map((ms) => uploadBytes / (1 << 20) / (ms / 1000));
    const rows: Record<string, Summary> = {
      "berth: Sandbox().create() → exec python3 → first output": summarize(create.berth.map((s) => s.ms)),
      "podman run --rm python3 → first output": summarize(create.podman),
      "berth: exec echo → wait() → stdout.read() (warm sandbox)": summarize(exec.berth.map((s) => s.ms)),
      "podman exec echo (running container)": summarize(exec.podman),
      [`berth: fs.upload_file ${uploadMb} MiB (ms)`]: summarize(upload.berth),
      [`podman cp ${uploadMb} MiB (ms)`]: summarize(upload.podman),
    };
    const names = Object.keys(rows);
    const refOf = (i: number) => rows[names[i % 2 === 0 ? i + 1 : i] as string];
    console.log(
      formatTable(
        ["what", "n", "p50 ms", "p95 ms", "p50 vs podman"],
        names.map((k, i) => {
          const s = rows[k] as Summary;
          return [k, String(s.n), fmtMs(s.p50), fmtMs(s.p95), fmtRatio(s.p50, refOf(i)?.p50)];
        }),
      ),
    );
    const ref = summarize(create.runc);
    const pooledS = pooled ? summarize(create.pooled.map((s) => s.ms)) : undefined;
    const createRows: Record<string, Summary> = {
      "berth: create → first output, no pool": rows[names[0] as string] as Summary,
      ...(pooledS
        ? { [`berth: create → first output, ${warmSandboxes} pre-warmed sandboxes`]: pooledS }
        : {}),
      "podman run --rm python3 → first output": rows[names[1] as string] as Summary,
      "runc run + python3 print (to its exit)": ref,
    };
    console.log(
      formatTable(
        ["create → first output", "n", "p50 ms", "p95 ms", "p50 vs runc+python"],
        Object.entries(createRows).map(([k, s]) => [
          k,
          String(s.n),
          fmtMs(s.p50),
          fmtMs(s.p95),
          fmtRatio(s.p50, ref.p50),
        ]),
      ),
    );
    const pool = pooled ? poolCounts(pooled) : undefined;
    if (pool) {
      console.log(`pre-warmed sandboxes given: ${pool.given}; failed to give: ${pool.failed}`);
      for (const l of pool.failures.slice(0, 3)) console.log(`  ${l}`);
    }
    const handOver = pooled
      ? Object.fromEntries(Object.entries(handOverSteps(pooled)).map(([k, v]) => [k, summarize(v)]))
      : undefined;
    if (handOver)
      console.log(
        `the agent's hand-over, per step (p50 ms, warm-up included): ${Object.entries(handOver)
          .map(([k, v]) => `${k} ${fmtMs(v.p50)}`)
          .join(", ")}`,
      );
    const three = summarize(exec.berth3.map((s) => s.ms));
    const one = rows[names[2] as string] as Summary;
    console.log(
      `berth exec: one request (processes/run) p50 ${fmtMs(one.p50)} ms, p95 ${fmtMs(one.p95)} ms; as three requests (exec, wait, output) p50 ${fmtMs(three.p50)} ms, p95 ${fmtMs(three.p95)} ms: ${fmtRatio(one.p50, three.p50)}`,
    );
    const throughput = { berth: summarize(mbps(upload.berth)), podman: summarize(mbps(upload.podman)) };
    console.log(
      `upload MiB/s p50: berth ${throughput.berth.p50.toFixed(0)}, podman cp ${throughput.podman.p50.toFixed(0)}`,
    );
    const createHttp = httpMedians(create.berth);
    const execHttp = httpMedians(exec.berth);
    const exec3Http = httpMedians(exec.berth3);
    const fmtHttp = (h: Record<string, Summary>) =>
      Object.entries(h)
        .map(([k, s]) => `  ${k}: p50 ${fmtMs(s.p50)} ms`)
        .join("\n");
    console.log(`berth create, per HTTP request the SDK sent:\n${fmtHttp(createHttp)}`);
    const session = summarize(exec.berth.flatMap((s) => (s.session_ms === null ? [] : [s.session_ms])));
    console.log(
      `berth exec round trip, per HTTP request:\n${fmtHttp(execHttp)}\nas three requests:\n${fmtHttp(exec3Http)}\n  (the process itself, coordinator's started_at → ended_at: p50 ${fmtMs(session.p50)} ms)`,
    );
    const breakdown = createBreakdown(create.berth);
    console.log(`berth create → first output, step by step (p50 over samples):\n${breakdown.text}`);
    const pooledBreakdown = pooled ? createBreakdown(create.pooled) : undefined;
    if (pooledBreakdown)
      console.log(
        `the same with pre-warmed sandboxes (no runtime marks: runc knows them by their pool name):\n${pooledBreakdown.text}`,
      );
    const raced = create.berth.filter((s) => s.terminate_raced).length;
    if (raced > 0)
      console.log(
        `terminate answered sandbox_terminated (exit-event race) in ${raced} of ${create.berth.length}`,
      );

    const createP50 = rows[names[0] as string]?.p50 ?? Number.NaN;
    const execP50 = rows[names[2] as string]?.p50 ?? Number.NaN;
    const verdict = {
      createToFirstOutputP50Ms: createP50,
      execRoundTripP50Ms: execP50,
      createMeetsTarget: createP50 <= TARGETS.createToFirstOutputP50Ms,
      execMeetsTarget: execP50 <= TARGETS.execRoundTripP50Ms,
      runcPythonP50Ms: ref.p50,
      createVsRunc: createP50 / ref.p50,
      ...(pooledS
        ? {
            createPooledP50Ms: pooledS.p50,
            createPooledVsRunc: pooledS.p50 / ref.p50,
            createPooledMeetsTarget: pooledS.p50 <= TARGETS.createPooledVsRunc * ref.p50,
          }
        : {}),
    };
    console.log(
      `targets: create → first output p50 <= ${TARGETS.createToFirstOutputP50Ms} ms: ${verdict.createMeetsTarget ? "met" : "NOT met"}; exec round trip p50 <= ${TARGETS.execRoundTripP50Ms} ms: ${verdict.execMeetsTarget ? "met" : "NOT met"}`,
    );
    if (pooledS)
      console.log(
        `target: create → first output p50 with pre-warmed sandboxes <= ${TARGETS.createPooledVsRunc}x runc + python: ${verdict.createPooledMeetsTarget ? "met" : "NOT met"} (${fmtRatio(pooledS.p50, ref.p50)}; without: ${fmtRatio(createP50, ref.p50)})`,
      );
    const path = writeResults(values.out ?? (pooled ? "sandbox-pool" : "sandbox"), {
      startedAt,
      machine,
      loadAvgAtEnd: machineInfo().loadAvg1,
      versions,
      options: { iterations, warmup, uploads, uploadMb, warmSandboxes },
      targets: TARGETS,
      verdict,
      summaries: rows,
      uploadMiBps: throughput,
      http: { create: createHttp, exec: execHttp, execThreeRequests: exec3Http },
      execThreeRequests: three,
      execSession: session,
      createBreakdown: breakdown.steps,
      ...(pooledBreakdown ? { createPooledBreakdown: pooledBreakdown.steps, pool, handOver } : {}),
      createVsRunc: createRows,
      terminateRaced: raced,
      samples: {
        createBerth: create.berth.map((s) => s.ms),
        createPodman: create.podman,
        createPooled: create.pooled.map((s) => s.ms),
        createPooledDetail: create.pooled,
        runcPython: create.runc,
        execBerth: exec.berth.map((s) => s.ms),
        execPodman: exec.podman,
        uploadBerth: upload.berth,
        uploadPodman: upload.podman,
        createBerthDetail: create.berth,
        execBerthSession: exec.berth.map((s) => s.session_ms),
        execBerthHttp: exec.berth.map((s) => s.http),
        execBerthThreeRequests: exec.berth3.map((s) => s.ms),
      },
    });
    console.log(`results: ${path}`);
  } finally {
    await cleanup.run();
  }
}

await main();
