// Inference gateway overhead: streamed chat completions of the tests' bigram
// model (one warm container on a `berth up` cluster) through POST
// /v1/chat/completions, against the same container's server called directly
// at its address, in the same run, interleaved. Per request: time to first
// token (request → first content chunk) and streamed tokens/s (tokens ÷
// request → last chunk). The server generates as fast as it can
// (--token-delay-ms 0), so the figures compare the paths, not the model; a
// delay paces it like a GPU server's stream (5 ms: 200 tokens/s).
// Usage: node --import tsx bench/inference/run.ts [--requests 200] [--tokens 256] [--rounds 3] [--token-delay-ms 0]
import { copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { waitFor } from "../../shared/net.ts";
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
      if (got === 1) first = performance.now();
    }
  }
  const end = performance.now();
  if (got !== tokens) throw new Error(`${t.name}: ${got} content chunks, not ${tokens}`);
  return { ttftMs: first - started, tokensPerS: got / ((end - started) / 1000), tokens: got };
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
  const [requests, tokens, rounds] = [Number(values.requests), Number(values.tokens), Number(values.rounds)];
  const delayMs = Number(values["token-delay-ms"]);
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

    const samples: Record<string, Sample[]> = { gateway: [], direct: [] };
    for (let r = 0; r < rounds; r++) {
      for (let i = 0; i < requests; i++) {
        // Interleaved, the first one alternating: machine noise falls on both alike.
        const order = (r * requests + i) % 2 === 0 ? [gateway, direct] : [direct, gateway];
        for (const t of order) samples[t.name]?.push(await once(t, tokens, i, delayMs));
      }
    }
    const ttft = {
      gateway: summarize((samples.gateway ?? []).map((s) => s.ttftMs)),
      direct: summarize((samples.direct ?? []).map((s) => s.ttftMs)),
    };
    const tps = {
      gateway: summarize((samples.gateway ?? []).map((s) => s.tokensPerS)),
      direct: summarize((samples.direct ?? []).map((s) => s.tokensPerS)),
    };
    console.log(
      formatTable(
        ["what", "n", "TTFT p50 ms", "TTFT p95 ms", "tokens/s p50", "tokens/s p95 (slowest 5%)"],
        (["gateway", "direct"] as const).map((k) => [
          k === "gateway" ? "berth POST /v1/chat/completions" : "the same server, direct",
          String(ttft[k].n),
          fmtMs(ttft[k].p50),
          fmtMs(ttft[k].p95),
          tps[k].p50.toFixed(0),
          // Higher is better: the 5th percentile is the slow tail.
          String(Math.round(percentile5((samples[k] ?? []).map((s) => s.tokensPerS)))),
        ]),
      ),
    );
    const verdict = {
      addedTtftP50Ms: ttft.gateway.p50 - ttft.direct.p50,
      throughputRatio: tps.gateway.p50 / tps.direct.p50,
      ttftMeetsTarget: ttft.gateway.p50 - ttft.direct.p50 <= TARGETS.addedTtftP50Ms,
      throughputMeetsTarget: tps.gateway.p50 / tps.direct.p50 >= TARGETS.throughputRatio,
    };
    console.log(
      `added TTFT p50 ${verdict.addedTtftP50Ms.toFixed(2)} ms (target <= ${TARGETS.addedTtftP50Ms}): ${verdict.ttftMeetsTarget ? "met" : "NOT met"}; ` +
        `throughput ${(verdict.throughputRatio * 100).toFixed(1)}% of direct (target >= ${TARGETS.throughputRatio * 100}%): ${verdict.throughputMeetsTarget ? "met" : "NOT met"}`,
    );
    const file = writeResults(delayMs > 0 ? "inference-paced" : "inference", {
      machine,
      params: { requests, tokens, rounds, tokenDelayMs: delayMs },
      targets: TARGETS,
      ttftMs: ttft,
      tokensPerS: tps,
      verdict,
      samples,
    });
    console.log(`results: ${file}`);
  } finally {
    await cleanup.run();
  }
}

function percentile5(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor((s.length - 1) * 0.05)] ?? 0;
}

await main();
