// Endpoint overhead: POST /endpoint/{name} on a `berth up` cluster (one warm
// container) against the same handler behind a plain Python http.server in a
// runc container of the same rootfs, and that server behind a bare node:http
// proxy in its own process (bench/lib/bare-proxy.mjs: what one more process
// hop costs here, the floor of any proxy), in the same run. Load from autocannon on
// loopback; latencies are autocannon's per-response times (float ms), not its
// whole-millisecond histogram.
// Usage: node --import tsx bench/endpoint/run.ts [--requests 2000] [--connections 16] [--duration 10] [--rounds 3]
import { spawn } from "node:child_process";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import autocannon from "autocannon";
import { freePort, waitFor } from "../../shared/net.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir } from "../lib/fs.ts";
import { startBenchCluster } from "../lib/functions.ts";
import { startBareProxy } from "../lib/bare-proxy.ts";
import { machineInfo } from "../lib/machine.ts";
import { exec, mustExec } from "../lib/proc.ts";
import { fmtMs, fmtRatio, formatTable, summarize, writeResults } from "../lib/stats.ts";

const TARGETS = { addedP50Ms: 1, throughputRatio: 0.7 };
const HERE = fileURLToPath(new URL(".", import.meta.url));
const BODY = JSON.stringify({ name: "bench" });

interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
}

interface Load {
  latenciesMs: number[];
  requests: number;
  non2xx: number;
  errors: number;
  seconds: number;
}

function load(t: Target, o: { connections: number; amount?: number; duration?: number }): Promise<Load> {
  return new Promise((resolve, reject) => {
    const latenciesMs: number[] = [];
    const started = process.hrtime.bigint();
    const inst = autocannon(
      {
        url: t.url,
        method: "POST",
        headers: { "content-type": "application/json", ...t.headers },
        body: BODY,
        connections: o.connections,
        ...(o.amount ? { amount: o.amount } : { duration: o.duration ?? 10 }),
        timeout: 30,
      },
      (err, r) => {
        if (err) return reject(err);
        resolve({
          latenciesMs,
          requests: r.requests.total,
          non2xx: r.non2xx,
          errors: r.errors + r.timeouts,
          seconds: Number(process.hrtime.bigint() - started) / 1e9,
        });
      },
    );
    inst.on("response", (_client: unknown, status: number, _bytes: number, ms: number) => {
      if (status >= 200 && status < 300) latenciesMs.push(ms);
    });
  });
}

/** The reference: direct_server.py in a runc container on the host's network namespace; returns its port. */
async function startDirect(cleanup: Cleanup, rootfs: string): Promise<number> {
  const dir = benchTempDir(cleanup, "berth-bench-ep-direct-");
  const port = await freePort();
  await mustExec("runc", ["spec", "--bundle", dir]);
  const specPath = join(dir, "config.json");
  const spec = JSON.parse(readFileSync(specPath, "utf8"));
  copyFileSync(join(HERE, "direct_server.py"), join(dir, "direct_server.py"));
  spec.process.terminal = false;
  spec.process.args = ["python3", "-u", "/bench/direct_server.py", String(port)];
  spec.root = { path: rootfs, readonly: true };
  spec.mounts.push({ destination: "/bench", type: "bind", source: dir, options: ["rbind", "ro"] });
  spec.linux.namespaces = spec.linux.namespaces.filter((n: { type: string }) => n.type !== "network");
  writeFileSync(specPath, JSON.stringify(spec));
  const id = `berth-bench-ep-${process.pid}`;
  const child = spawn("runc", ["run", "--bundle", dir, id], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  for (const s of [child.stdout, child.stderr])
    createInterface({ input: s }).on("line", (l) => (out += `${l}\n`));
  cleanup.add("stop the direct server container", async () => {
    await exec("runc", ["kill", id, "KILL"]);
    await exec("runc", ["delete", "--force", id]);
  });
  await waitFor(() => out.includes("ready"), { timeoutMs: 60_000, what: "the direct server" }).catch((e) => {
    throw new Error(`${(e as Error).message}\n${out}`);
  });
  return port;
}

async function main() {
  const { values } = parseArgs({
    options: {
      requests: { type: "string", default: "2000" },
      connections: { type: "string", default: "16" },
      duration: { type: "string", default: "10" },
      rounds: { type: "string", default: "3" },
    },
  });
  const [requests, connections, duration, rounds] = [
    Number(values.requests),
    Number(values.connections),
    Number(values.duration),
    Number(values.rounds),
  ];
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const cluster = await startBenchCluster(cleanup);
    const appDir = benchTempDir(cleanup, "berth-bench-ep-app-");
    copyFileSync(join(HERE, "app.py"), join(appDir, "app.py"));
    const deployed = await cluster.cli(["deploy", "app.py:hello"], appDir);
    const url = deployed.match(/https?:\/\/\S+\/endpoint\/\S+/)?.[0];
    if (!url) throw new Error(`berth deploy printed no endpoint URL:\n${deployed}`);
    const berth: Target = { name: "berth", url, headers: { authorization: `Bearer ${cluster.token}` } };
    // The first request starts the container (cold); then it stays warm (keep_warm_seconds 600).
    await waitFor(
      async () =>
        (
          await fetch(url, {
            method: "POST",
            headers: { ...berth.headers, "content-type": "application/json" },
            body: BODY,
          })
        ).ok,
      {
        timeoutMs: 180_000,
        what: "the first endpoint answer",
      },
    );
    const directPort = await startDirect(cleanup, cluster.rootfs);
    const direct: Target = { name: "direct", url: `http://127.0.0.1:${directPort}/`, headers: {} };
    const barePort = await startBareProxy(cleanup, "127.0.0.1", directPort);
    const bare: Target = { name: "bare", url: `http://127.0.0.1:${barePort}/`, headers: {} };

    const names = ["berth", "direct", "bare"] as const;
    const lat: Record<string, number[]> = { berth: [], direct: [], bare: [] };
    const rps: Record<string, number[]> = { berth: [], direct: [], bare: [] };
    const failures: Record<string, number> = { berth: 0, direct: 0, bare: 0 };
    const targets = [berth, direct, bare];
    for (let r = 0; r < rounds; r++) {
      // The first one rotates each round: machine drift falls on all three alike.
      const order = [...targets.slice(r % 3), ...targets.slice(0, r % 3)];
      for (const t of order) {
        const l = await load(t, { connections: 1, amount: requests });
        lat[t.name]?.push(...l.latenciesMs);
        const x = await load(t, { connections, duration });
        rps[t.name]?.push(x.requests / x.seconds);
        failures[t.name] = (failures[t.name] ?? 0) + l.non2xx + l.errors + x.non2xx + x.errors;
      }
    }
    const s = {
      berth: summarize(lat.berth ?? []),
      direct: summarize(lat.direct ?? []),
      bare: summarize(lat.bare ?? []),
    };
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
    const tput = { berth: mean(rps.berth ?? []), direct: mean(rps.direct ?? []), bare: mean(rps.bare ?? []) };
    const label = {
      berth: "berth POST /endpoint/{name}",
      direct: "python http.server in runc",
      bare: "the same server behind a bare node:http proxy",
    };
    console.log(
      formatTable(
        [
          "what",
          "n",
          "p50 ms",
          "p95 ms",
          "p99 ms",
          `req/s (${connections} conns)`,
          "failed",
          "p50 vs direct",
          "req/s vs direct",
        ],
        names.map((k) => [
          label[k],
          String(s[k].n),
          fmtMs(s[k].p50),
          fmtMs(s[k].p95),
          fmtMs(s[k].p99),
          tput[k].toFixed(0),
          String(failures[k]),
          fmtRatio(s[k].p50, s.direct.p50),
          `${((tput[k] / tput.direct) * 100).toFixed(0)}%`,
        ]),
      ),
    );
    const verdict = {
      addedP50Ms: s.berth.p50 - s.direct.p50,
      throughputRatio: tput.berth / tput.direct,
      addedP50MeetsTarget: s.berth.p50 - s.direct.p50 <= TARGETS.addedP50Ms,
      throughputMeetsTarget: tput.berth / tput.direct >= TARGETS.throughputRatio,
      bareProxyAddedP50Ms: s.bare.p50 - s.direct.p50,
      bareProxyThroughputRatio: tput.bare / tput.direct,
    };
    console.log(
      `added p50 ${verdict.addedP50Ms.toFixed(2)} ms (target <= ${TARGETS.addedP50Ms}): ${verdict.addedP50MeetsTarget ? "met" : "NOT met"}; ` +
        `throughput ${(verdict.throughputRatio * 100).toFixed(0)}% of direct (target >= ${TARGETS.throughputRatio * 100}%): ${verdict.throughputMeetsTarget ? "met" : "NOT met"}; ` +
        `a bare proxy adds ${verdict.bareProxyAddedP50Ms.toFixed(2)} ms p50 and serves ${(verdict.bareProxyThroughputRatio * 100).toFixed(0)}% of direct`,
    );
    const file = writeResults("endpoint", {
      machine,
      params: { requests, connections, duration, rounds },
      targets: TARGETS,
      latency: s,
      throughputRps: tput,
      rpsPerRound: rps,
      failures,
      verdict,
      samplesMs: lat,
    });
    console.log(`results: ${file}`);
  } finally {
    await cleanup.run();
  }
}

await main();
