// Queue put+pop and Map set+get round trips per second: berth's Queue and Map
// (the Python SDK from a script over the gateway route, and from inside a
// function container over the agent's socket and NATS relay; the
// coordinator's stores called from Node) against raw JetStream from Node
// (a work-queue stream with a pull consumer; a KV bucket) on a nats-server
// started here, in the same run. One client, one operation pair at a time:
// this measures the latency-bound rate a single worker sees.
// Usage: node --import tsx bench/queues/run.ts [--ops 2000]
import { randomBytes } from "node:crypto";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { AckPolicy, connect, type NatsConnection, RetentionPolicy } from "nats";
import { MapStore } from "../../coordinator/state/maps.ts";
import { QueueStore } from "../../coordinator/state/queues.ts";
import { freePort } from "../../shared/net.ts";
import { closeNats, startNatsServer } from "../../shared/nats-server.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir } from "../lib/fs.ts";
import { startBenchCluster } from "../lib/functions.ts";
import { machineInfo, toolVersion } from "../lib/machine.ts";
import { exec } from "../lib/proc.ts";
import { formatTable, writeResults } from "../lib/stats.ts";

const SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));
const APP = fileURLToPath(new URL("./app.py", import.meta.url));

interface Row {
  what: string;
  ops: number;
  queuePutPopPerS: number;
  mapSetGetPerS: number;
}

const enc = (i: number) => new TextEncoder().encode(String(i));

/** Raw JetStream: publish + pull-consumer next + ack; KV put + get. */
async function rawJetStream(nc: NatsConnection, n: number): Promise<Row> {
  const jsm = await nc.jetstreamManager();
  await jsm.streams.add({ name: "RAW_Q", subjects: ["raw.q"], retention: RetentionPolicy.Workqueue });
  await jsm.consumers.add("RAW_Q", { durable_name: "raw", ack_policy: AckPolicy.Explicit });
  const js = nc.jetstream();
  const consumer = await js.consumers.get("RAW_Q", "raw");
  const kv = await js.views.kv("raw_kv", { history: 1 });
  await js.publish("raw.q", enc(-1));
  await (await consumer.next({ expires: 5000 }))?.ackAck();
  let t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await js.publish("raw.q", enc(i));
    const m = await consumer.next({ expires: 5000 });
    if (!m || new TextDecoder().decode(m.data) !== String(i))
      throw new Error(`raw pop ${i} got ${m?.string()}`);
    await m.ackAck();
  }
  const queueS = (performance.now() - t0) / 1000;
  t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await kv.put(`k${i}`, enc(i));
    const e = await kv.get(`k${i}`);
    if (e?.string() !== String(i)) throw new Error(`raw kv get ${i}`);
  }
  const mapS = (performance.now() - t0) / 1000;
  return { what: "raw JetStream from Node", ops: n, queuePutPopPerS: n / queueS, mapSetGetPerS: n / mapS };
}

/** berth's coordinator stores from Node: the JetStream work berth does per operation. */
async function berthStores(nc: NatsConnection, n: number): Promise<Row> {
  const queues = new QueueStore({ nc });
  const maps = new MapStore(nc);
  await queues.put("ws-bench", "q", enc(-1));
  await queues.pop("ws-bench", "q");
  let t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await queues.put("ws-bench", "q", enc(i));
    const v = await queues.pop("ws-bench", "q");
    if (new TextDecoder().decode(v) !== String(i)) throw new Error(`stores pop ${i}`);
  }
  const queueS = (performance.now() - t0) / 1000;
  t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await maps.set("ws-bench", "m", String(i), enc(i));
    const v = await maps.get("ws-bench", "m", String(i));
    if (new TextDecoder().decode(v) !== String(i)) throw new Error(`stores get ${i}`);
  }
  const mapS = (performance.now() - t0) / 1000;
  return {
    what: "berth stores from Node (coordinator code)",
    ops: n,
    queuePutPopPerS: n / queueS,
    mapSetGetPerS: n / mapS,
  };
}

async function main() {
  const { values } = parseArgs({ options: { ops: { type: "string", default: "2000" } } });
  const n = Number(values.ops);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--ops must be a positive integer, not ${values.ops}`);
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const natsVersion = await toolVersion("nats-server", ["--version"]);
    // Raw JetStream and the stores share one nats-server made here, as the cluster's own.
    const dir = benchTempDir(cleanup, "berth-bench-queues-");
    const password = randomBytes(12).toString("hex");
    const nats = await startNatsServer({ dir, port: await freePort(), users: [{ user: "bench", password }] });
    cleanup.add("stop nats-server", () => nats.stop());
    const nc = await connect({ servers: nats.url, user: "bench", pass: password });
    cleanup.add("close NATS", () => closeNats(nc));

    const cluster = await startBenchCluster(cleanup);
    const appDir = benchTempDir(cleanup, "berth-bench-queues-app-");
    copyFileSync(APP, join(appDir, "app.py"));
    const sdk = async (mode: string): Promise<Row> => {
      const r = await exec("python3", ["app.py", mode, String(n)], {
        env: { ...process.env, PYTHONPATH: SDK_DIR, SERVICE_TOKEN: cluster.token, BERTH_URL: cluster.url },
        timeoutMs: 1_200_000,
        cwd: appDir,
      });
      if (r.code !== 0) throw new Error(`app.py ${mode} failed (${r.code}): ${r.stderr.slice(-2000)}`);
      const j = JSON.parse(r.stdout.trim().split("\n").pop() as string);
      return {
        what:
          mode === "client"
            ? "berth SDK from a script (HTTP gateway)"
            : "berth SDK in a container (agent relay)",
        ops: n,
        queuePutPopPerS: j.queue_put_pop_per_s,
        mapSetGetPerS: j.map_set_get_per_s,
      };
    };

    const rows: Row[] = [];
    rows.push(await rawJetStream(nc, n));
    rows.push(await berthStores(nc, n));
    rows.push(await sdk("client"));
    rows.push(await sdk("container"));
    const raw = rows[0] as Row;
    console.log(
      formatTable(
        ["what", "ops", "queue put+pop/s", "vs raw", "map set+get/s", "vs raw"],
        rows.map((r) => [
          r.what,
          String(r.ops),
          r.queuePutPopPerS.toFixed(0),
          `${((100 * r.queuePutPopPerS) / raw.queuePutPopPerS).toFixed(0)}%`,
          r.mapSetGetPerS.toFixed(0),
          `${((100 * r.mapSetGetPerS) / raw.mapSetGetPerS).toFixed(0)}%`,
        ]),
      ),
    );
    const path = writeResults("queues", { machine, natsVersion, ops: n, rows });
    console.log(`results: ${path}`);
  } finally {
    await cleanup.run();
  }
}

await main();
