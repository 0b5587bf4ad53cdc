// Inference gateway overhead: streamed chat completions of the tests' bigram
// model (one warm container on a `berth up` cluster) through POST
// /v1/chat/completions, against the same container's server called directly
// at its address and behind a bare node:http proxy (bench/lib/bare-proxy.mjs: what one
// more process hop costs), in the same run, interleaved. Per request: time to first
// token (request → first content chunk), streamed tokens/s (the tokens after
// the first ÷ first → last content chunk: the stream's own rate, as vLLM's
// benchmarks count it, so the time to first token is not counted twice) and
// end-to-end tokens/s (tokens ÷ request → stream end, which holds the time to
// first token too). The server generates as fast as it can
// (--token-delay-ms 0), so the figures compare the paths, not the model; a
// delay paces it like a GPU server's stream (5 ms: 200 tokens/s).
// Targets: added time to first token <= 2 ms p50; streamed tokens/s >= 95% of direct.
// `--token-delay-ms 0,5` measures both ways on one cluster, one after the
// other (`--requests`/`--tokens` then take one value, or one per delay), and
// judges the pair the targets are set for: the streamed rate unpaced, the
// added time to first token paced.
// Usage: node --import tsx bench/inference/run.ts [--requests 200] [--tokens 256] [--rounds 3] [--token-delay-ms 0]
import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { waitFor } from "../../shared/net.ts";
import { startBareProxy } from "../lib/bare-proxy.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir } from "../lib/fs.ts";
import { startBenchCluster } from "../lib/functions.ts";
import { machineInfo } from "../lib/machine.ts";
import { mustExec } from "../lib/proc.ts";
import { fmtMs, formatTable, summarize, writeResults } from "../lib/stats.ts";

const TARGETS = { addedTtftP50Ms: 2, throughputRatio: 0.95 };
const HERE = fileURLToPath(new URL(".", import.meta.url));
const MODEL_APP = fileURLToPath(new URL("../../test/fixtures/inference/bigram_app.py", import.meta.url));
const LICENSES = "/usr/share/common-licenses";

interface Target {
  name: string;
  url: string;
  headers: Record<string, string>;
}

interface Sample {
  ttftMs: number;
  /** Tokens after the first ÷ first → last content chunk. */
  streamTokensPerS: number;
  /** All tokens ÷ request sent → stream end. */
  tokensPerS: number;
  tokens: number;
}

/** One streamed completion, timed from the request to the first and the last content chunk. */
async function once(t: Target, tokens: number, seed: number, delayMs = 0): Promise<Sample> {
  const started = performance.now();
  const r = await fetch(t.url, {
    method: "POST",
    headers: { "content-type": "application/json", ...t.headers },
    body: JSON.stringify({
      model: "bench-bigram",
      messages: [{ role: "user", content: "the" }],
      max_tokens: tokens,
      stream: true,
      seed,
      token_delay_s: delayMs / 1000,
    }),
  });
  if (!r.ok || !r.body) throw new Error(`${t.name}: ${r.status} ${await r.text()}`);
  const decoder = new TextDecoder();
  let first = 0;
  let last = 0;
  let got = 0;
  let rest = "";
  for await (const chunk of r.body) {
    rest += decoder.decode(chunk as Uint8Array, { stream: true });
    const events = rest.split("\n\n");
    rest = events.pop() ?? "";
    for (const e of events) {
      if (!e.startsWith("data: {")) continue;
      const c = JSON.parse(e.slice(6)) as { choices: { delta?: { content?: string } }[] };
      if (!c.choices[0]?.delta?.content) continue;
      got++;
      last = performance.now();
      if (got === 1) first = last;
    }
  }
  const end = performance.now();
  if (got !== tokens) throw new Error(`${t.name}: ${got} content chunks, not ${tokens}`);
  return {
    ttftMs: first - started,
    streamTokensPerS: (got - 1) / ((last - first) / 1000),
    tokensPerS: got / ((end - started) / 1000),
    tokens: got,
  };
}

async function main() {
  const { values } = parseArgs({
    options: {
      requests: { type: "string", default: "200" },
      tokens: { type: "string", default: "256" },
      rounds: { type: "string", default: "3" },
      "token-delay-ms": { type: "string", default: "0" },
    },
  });
  const rounds = Number(values.rounds);
  const delays = listOption("--token-delay-ms", values["token-delay-ms"]);
  const requestsPer = perDelay("--requests", values.requests, delays.length);
  const tokensPer = perDelay("--tokens", values.tokens, delays.length);
  if (tokensPer.some((t) => !(t >= 2)))
    throw new Error("--tokens must be at least 2: the streamed rate is measured from the first token on");
  if (delays.length > 1 && !(delays.includes(0) && delays.some((d) => d > 0)))
    throw new Error("--token-delay-ms with two values takes 0 (unpaced) and a pace (e.g. 0,5)");
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const cluster = await startBenchCluster(cleanup);
    const appDir = benchTempDir(cleanup, "berth-bench-inf-app-");
    copyFileSync(join(HERE, "app.py"), join(appDir, "app.py"));
    copyFileSync(MODEL_APP, join(appDir, "bigram_app.py"));
    mkdirSync(join(appDir, "corpus"));
    for (const f of readdirSync(LICENSES)
      .filter((f) => statSync(join(LICENSES, f)).isFile())
      .slice(0, 6))
      writeFileSync(join(appDir, "corpus", f), readFileSync(join(LICENSES, f)));
    await cluster.cli(["deploy", "app.py:model"], appDir);
    const gateway: Target = {
      name: "gateway",
      url: `${cluster.url}/v1/chat/completions`,
      headers: { authorization: `Bearer ${cluster.token}` },
    };
    // The first request starts the container; then it stays warm (keep_warm_seconds 600).
    let lastError = "";
    await waitFor(
      async () => {
        try {
          await once(gateway, 4, 0);
          return true;
        } catch (e) {
          lastError = (e as Error).message;
          return false;
        }
      },
      { timeoutMs: 240_000, what: "the first answer through the gateway" },
    ).catch((e) => {
      throw new Error(`${(e as Error).message}; the last answer: ${lastError}`);
    });
    // The same container's server, called directly at its address on the agent's bridge.
    const sock = join(cluster.dataDir, "agent", "agent.sock");
    const ps = JSON.parse(
      (
        await mustExec(process.execPath, [
          "--import",
          "tsx",
          fileURLToPath(new URL("../../cli/main.ts", import.meta.url)),
          "agent",
          "ps",
          "--json",
          "--socket",
          sock,
        ])
      ).stdout,
    ) as { ipv4?: string; state?: string }[];
    const ipv4 = ps.find((c) => c.ipv4)?.ipv4;
    if (!ipv4) throw new Error(`no container address in berth agent ps: ${JSON.stringify(ps)}`);
    const direct: Target = { name: "direct", url: `http://${ipv4}:8000/v1/chat/completions`, headers: {} };
    await once(direct, 4, 0);
    // The same server behind a bare node:http proxy in its own process: the floor of one more hop.
    const barePort = await startBareProxy(cleanup, ipv4, 8000);
    const bare: Target = {
      name: "bare",
      url: `http://127.0.0.1:${barePort}/v1/chat/completions`,
      headers: {},
    };
    await once(bare, 4, 0);

    const targets = [gateway, direct, bare];
    const modes = [];
    for (const [m, delayMs] of delays.entries()) {
      const requests = requestsPer[m] as number;
      const tokens = tokensPer[m] as number;
      modes.push({
        delayMs,
        ...(await measure(targets, { requests, tokens, rounds, delayMs }, machine.loadAvg1)),
      });
    }
    const both =
      modes.length > 1
        ? {
            // The pair the targets are set for, from this one run.
            unpacedThroughputMet: modes.find((x) => x.delayMs === 0)?.verdict.throughputMeetsTarget === true,
            pacedTtftMet: modes.find((x) => x.delayMs > 0)?.verdict.ttftMeetsTarget === true,
          }
        : undefined;
    if (both)
      console.log(
        `in this run: streamed throughput unpaced ${both.unpacedThroughputMet ? "met" : "NOT met"}, ` +
          `added TTFT paced ${both.pacedTtftMet ? "met" : "NOT met"}`,
      );
    const name =
      modes.length > 1 ? "inference-both" : (delays[0] as number) > 0 ? "inference-paced" : "inference";
    const file = writeResults(name, {
      machine,
      loadAvg1AtEnd: loadavg()[0],
      params: { requests: requestsPer, tokens: tokensPer, rounds, tokenDelayMs: delays },
      targets: TARGETS,
      ...(modes.length > 1 ? { modes, both } : modes[0]),
    });
    console.log(`results: ${file}`);
  } finally {
    await cleanup.run();
  }
}

/** One mode (unpaced or paced) over the three targets: printed, and returned for the JSON. */
async function measure(
  targets: Target[],
  o: { requests: number; tokens: number; rounds: number; delayMs: number },
  loadAtStart: number,
) {
  const { requests, tokens, rounds, delayMs } = o;
  const load0 = loadavg()[0] ?? loadAtStart;
  {
    const samples: Record<string, Sample[]> = { gateway: [], direct: [], bare: [] };
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < requests; i++) {
        // Interleaved, the first one rotating: machine noise falls on all three alike.
        const k = (r * requests + i) % targets.length;
        const order = [...targets.slice(k), ...targets.slice(0, k)];
        for (const t of order) samples[t.name]?.push(await once(t, tokens, i, delayMs));
      }
    }
    const pick = (k: string, f: (s: Sample) => number) => (samples[k] ?? []).map(f);
    const ttft = {
      gateway: summarize(pick("gateway", (s) => s.ttftMs)),
      direct: summarize(pick("direct", (s) => s.ttftMs)),
      bare: summarize(pick("bare", (s) => s.ttftMs)),
    };
    const stream = {
      gateway: summarize(pick("gateway", (s) => s.streamTokensPerS)),
      direct: summarize(pick("direct", (s) => s.streamTokensPerS)),
      bare: summarize(pick("bare", (s) => s.streamTokensPerS)),
    };
    const tps = {
      gateway: summarize(pick("gateway", (s) => s.tokensPerS)),
      direct: summarize(pick("direct", (s) => s.tokensPerS)),
      bare: summarize(pick("bare", (s) => s.tokensPerS)),
    };
    console.log(
      formatTable(
        [
          "what",
          "n",
          "TTFT p50 ms",
          "TTFT p95 ms",
          "streamed tokens/s p50",
          "streamed p5 (slowest 5%)",
          "end-to-end tokens/s p50",
        ],
        (["gateway", "direct", "bare"] as const).map((k) => [
          {
            gateway: "berth POST /v1/chat/completions",
            direct: "the same server, direct",
            bare: "the same server behind a bare node:http proxy",
          }[k],
          String(ttft[k].n),
          fmtMs(ttft[k].p50),
          fmtMs(ttft[k].p95),
          stream[k].p50.toFixed(0),
          // Higher is better: the 5th percentile is the slow tail.
          String(Math.round(percentile5(pick(k, (s) => s.streamTokensPerS)))),
          tps[k].p50.toFixed(0),
        ]),
      ),
    );
    const verdict = {
      addedTtftP50Ms: ttft.gateway.p50 - ttft.direct.p50,
      addedTtftP95Ms: ttft.gateway.p95 - ttft.direct.p95,
      throughputRatio: stream.gateway.p50 / stream.direct.p50,
      endToEndThroughputRatio: tps.gateway.p50 / tps.direct.p50,
      ttftMeetsTarget: ttft.gateway.p50 - ttft.direct.p50 <= TARGETS.addedTtftP50Ms,
      throughputMeetsTarget: stream.gateway.p50 / stream.direct.p50 >= TARGETS.throughputRatio,
      // What one more process hop costs here (the bare proxy), and the gateway over that hop.
      bareAddedTtftP50Ms: ttft.bare.p50 - ttft.direct.p50,
      gatewayOverBareTtftP50Ms: ttft.gateway.p50 - ttft.bare.p50,
      bareThroughputRatio: stream.bare.p50 / stream.direct.p50,
    };
    console.log(
      `added TTFT p50 ${verdict.addedTtftP50Ms.toFixed(2)} ms (target <= ${TARGETS.addedTtftP50Ms}): ${verdict.ttftMeetsTarget ? "met" : "NOT met"}; ` +
        `streamed throughput ${(verdict.throughputRatio * 100).toFixed(1)}% of direct (target >= ${TARGETS.throughputRatio * 100}%): ${verdict.throughputMeetsTarget ? "met" : "NOT met"}; ` +
        `end-to-end ${(verdict.endToEndThroughputRatio * 100).toFixed(1)}%; ` +
        `a bare proxy adds ${verdict.bareAddedTtftP50Ms.toFixed(2)} ms TTFT p50 (the gateway ${verdict.gatewayOverBareTtftP50Ms.toFixed(2)} ms more), streams at ${(verdict.bareThroughputRatio * 100).toFixed(1)}%; load average ${load0.toFixed(2)} → ${loadavg()[0]?.toFixed(2)}`,
    );
    return { ttftMs: ttft, streamTokensPerS: stream, tokensPerS: tps, verdict, samples };
  }
}

/** A comma-separated list of numbers ≥ 0. */
function listOption(flag: string, v: string | undefined): number[] {
  const xs = String(v ?? "")
    .split(",")
    .map(Number);
  if (xs.length === 0 || xs.length > 2 || xs.some((x) => !Number.isFinite(x) || x < 0))
    throw new Error(`${flag} takes one or two numbers >= 0, comma-separated; got ${JSON.stringify(v)}`);
  return xs;
}

/** One value for every delay, or one per delay. */
function perDelay(flag: string, v: string | undefined, n: number): number[] {
  const xs = listOption(flag, v);
  if (xs.length === 1) return Array.from({ length: n }, () => xs[0] as number);
  if (xs.length !== n) throw new Error(`${flag} takes one value or one per --token-delay-ms value (${n})`);
  return xs;
}

function percentile5(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) * 0.05)] ?? 0;
}

await main();
