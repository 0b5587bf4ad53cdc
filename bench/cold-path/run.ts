// What a request path costs when it runs cold: the same small piece of
// work timed back to back (the reference, caches warm) and after a gap of
// idle time or of spinning on the clock, in one process, in the same run.
// The /v1 gateway's paced figure (bench/inference, a request every few
// hundred ms) is bounded by this: every step of a request path that ran
// while the machine did something else pays it.
//
// Two pieces of work:
// - http.request(): building one keep-alive POST to a loopback server (the
//   constructor only, as the forwarder builds one per request); the exchange
//   itself runs after the timing, so each sample starts from the same state.
// - json: twenty JSON.stringify + JSON.parse round trips of a chat request body.
//
// Usage: node --import tsx bench/cold-path/run.ts [--samples 300] [--gap-ms 1,5,20,100]

import { createServer, request, Agent } from "node:http";
import type { AddressInfo } from "node:net";
import { parseArgs } from "node:util";
import { machineInfo } from "../lib/machine.ts";
import { fmtRatio, formatTable, summarize, writeResults } from "../lib/stats.ts";

const { values } = parseArgs({
  options: {
    samples: { type: "string", default: "300" },
    "gap-ms": { type: "string", default: "1,5,20,100" },
  },
});
const samples = Number(values.samples);
const gaps = String(values["gap-ms"]).split(",").map(Number);
if (!(samples > 0) || gaps.some((g) => !(g > 0))) throw new Error("--samples and --gap-ms must be positive");

const server = createServer((req, res) => {
  req.resume();
  req.on("end", () => res.end("ok"));
});
await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
const port = (server.address() as AddressInfo).port;
const agent = new Agent({ keepAlive: true });
const headers = {
  "content-type": "application/json",
  "content-length": "64",
  "x-task-id": "task-0123456789abcdef",
  "user-agent": "bench",
  accept: "*/*",
  "x-forwarded-for": "127.0.0.1",
  "x-forwarded-proto": "http",
};
const body = Buffer.alloc(64, 97);
const chat = { model: "bench-bigram", messages: [{ role: "user", content: "hello there" }], stream: true };

interface Work {
  name: string;
  /** Runs the work once; resolves to the µs of its timed part. */
  once(): Promise<number>;
}

const works: Work[] = [
  {
    name: "http.request()",
    async once() {
      const t0 = performance.now();
      const up = request({
        agent,
        host: "127.0.0.1",
        port,
        method: "POST",
        path: "/v1/chat/completions",
        headers,
      });
      const us = (performance.now() - t0) * 1000;
      up.end(body);
      await new Promise<void>((r) => up.on("response", (res) => res.resume().on("end", r)));
      return us;
    },
  },
  {
    name: "json",
    async once() {
      const t0 = performance.now();
      let n = 0;
      for (let i = 0; i < 20; i++)
        n += (JSON.parse(JSON.stringify(chat)) as { stream: boolean }).stream ? 1 : 0;
      const us = (performance.now() - t0) * 1000;
      if (n !== 20) throw new Error("json round trip lost a field");
      return us;
    },
  },
];

type Gap = { label: string; wait: () => Promise<void> };
const modes: Gap[] = [{ label: "back to back", wait: async () => {} }];
for (const ms of gaps) {
  modes.push({ label: `after ${ms} ms idle`, wait: () => new Promise((r) => setTimeout(r, ms)) });
  modes.push({
    label: `after ${ms} ms spinning`,
    wait: async () => {
      const end = performance.now() + ms;
      while (performance.now() < end);
    },
  });
}

const results: Record<string, Record<string, number[]>> = {};
for (const w of works) {
  results[w.name] = {};
  for (let i = 0; i < 50; i++) await w.once(); // warm-up: the JIT has seen the path
  for (const m of modes) {
    const got: number[] = [];
    for (let i = 0; i < samples; i++) {
      await m.wait();
      got.push(await w.once());
    }
    (results[w.name] as Record<string, number[]>)[m.label] = got;
  }
}
agent.destroy();
server.close();

const rows: string[][] = [];
for (const w of works) {
  const byMode = results[w.name] as Record<string, number[]>;
  const ref = summarize(byMode["back to back"] ?? []).p50;
  for (const m of modes) {
    const s = summarize(byMode[m.label] ?? []);
    rows.push([w.name, m.label, s.p50.toFixed(1), s.p95.toFixed(1), fmtRatio(s.p50, ref)]);
  }
}
console.log(formatTable(["work", "when", "p50 µs", "p95 µs", "p50 vs back to back"], rows));
const path = writeResults("cold-path", {
  machine: machineInfo(),
  samples,
  gapsMs: gaps,
  results,
});
console.log(`results: ${path}`);
