// Issue 18, requirement 3: "SIGKILL a coordinator during a sandbox exec".
// `berth up --replicas 3`; a sandbox made through the round-robin balancer;
// three processes started through coordinator 2 (one writing its output over
// several seconds, a `cat`, a `sleep`), whose output is followed through
// coordinator 2 too; coordinator 2 is SIGKILLed mid-run (berth up held, so it
// stays dead). Through coordinators 1 and 3: the writer's status, every byte
// of its output in order (the follow resumed from the offset it reached, and
// read whole) and its exit code; stdin and kill still work on the others.
// Then the Python SDK: a `wait()` and an output iteration in flight when the
// coordinator serving them (3) is SIGKILLed resume through a failover
// balancer on coordinator 1 and see the right exit code and every line.
// The processes count as the summary's tasks (test/faults/summary.ts).

import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { test } from "node:test";
import { waitFor } from "../../shared/net.ts";
import { bearer } from "../helpers/auth.ts";
import { UP_COMMANDS } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { startHaCluster } from "./ha-cluster.ts";
import { type SeenTask, assertFaultSummary, tallyTasks } from "./summary.ts";

const LINES = 40;
/** Writes LINES lines over about 8 s, then exits 7. */
const WRITER = `i=1; while [ $i -le ${LINES} ]; do printf 'line %03d abcdefghijklmnopqrstuvwxyz\\n' $i; i=$((i+1)); sleep 0.2; done; exit 7`;
const EXPECTED = Array.from(
  { length: LINES },
  (_, i) => `line ${String(i + 1).padStart(3, "0")} abcdefghijklmnopqrstuvwxyz\n`,
).join("");

const SCRIPT = `
import json, sys, threading
from berth import Sandbox

def out(**kw):
    print("RESULT " + json.dumps(kw), flush=True)

if sys.argv[1] == "create":
    sb = Sandbox(cpu=0.25, memory=128).create()
    out(id=sb.sandbox_id())
elif sys.argv[1] == "wait":
    sb = Sandbox().connect(sys.argv[2])
    p = sb.process.exec("sh", "-c", "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo tick $i; sleep 0.5; done; exit 3")
    lines = []
    def read():
        for line in p.stdout:
            lines.append(line)
            if len(lines) == 1:
                # Both the wait (below) and this stream are in flight now: the test kills their coordinator.
                open(sys.argv[3], "w").write(str(p.pid))
    reader = threading.Thread(target=read)
    reader.start()
    code = p.wait()
    reader.join()
    out(pid=p.pid, code=code, lines=lines)
`;

const result = (stdout: string) => {
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(line, `no RESULT line in:\n${stdout}`);
  return JSON.parse(line.slice(7)) as Record<string, unknown>;
};

/** A balancer that sends every request to the first backend that accepts the connection (failover). */
async function startFailover(backends: string[]): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const attempt = (i: number) => {
        const b = new URL(backends[i] as string);
        const out = httpRequest(
          {
            host: b.hostname,
            port: b.port,
            method: req.method,
            path: req.url,
            headers: { ...req.headers, host: b.host },
          },
          (r) => {
            res.writeHead(r.statusCode ?? 502, r.headers);
            r.pipe(res);
            r.on("error", () => res.destroy());
          },
        );
        out.on("error", (e) => {
          if ((e as NodeJS.ErrnoException).code === "ECONNREFUSED" && i + 1 < backends.length) attempt(i + 1);
          else res.destroy();
        });
        out.end(Buffer.concat(chunks));
      };
      attempt(0);
    });
  });
  server.on("clientError", (_e, socket) => socket.destroy());
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

test("berth up --replicas 3: a coordinator SIGKILLed during a sandbox exec loses no process", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const { up, td, coordinators, env, killCoordinator, pauseSupervisor } = await startHaCluster(t);
  writeFileSync(join(up.appDir, "sb.py"), SCRIPT);
  const sid = String(result(await up.python(["sb.py", "create"], 240_000, env)).id);
  /** A gateway call on coordinator n (1-based), not through the balancer. */
  const on = (n: number, path: string, init: RequestInit = {}) =>
    fetch(`${coordinators[n - 1]}/api/v1/gateway/sandboxes/${sid}${path}`, {
      ...init,
      headers: { ...bearer(up.token), ...((init.headers as Record<string, string>) ?? {}) },
    });
  const json = async (n: number, path: string, body?: unknown) => {
    const r = await on(n, path, {
      method: body === undefined ? "GET" : "POST",
      ...(body === undefined
        ? {}
        : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }),
    });
    const j = (await r.json()) as Record<string, unknown>;
    assert.equal(j.ok, true, `${path} on coordinator ${n}: ${JSON.stringify(j)}`);
    return j;
  };
  td.defer(async () => {
    await on(1, "/terminate", { method: "POST" }).catch(() => {});
  });

  // Started through coordinator 2: it is the one that dies.
  const writer = Number((await json(2, "/processes", { args: ["sh", "-c", WRITER] })).pid);
  const cat = Number((await json(2, "/processes", { args: ["cat"] })).pid);
  const sleeper = Number((await json(2, "/processes", { args: ["sleep", "600"] })).pid);
  assert.deepEqual([writer, cat, sleeper], [1, 2, 3]);

  // Follow the writer's stdout through coordinator 2 until a few lines came, then kill it.
  const follow = await on(2, `/processes/${writer}/output?stream=stdout&follow=true`);
  assert.equal(follow.status, 200);
  const reader = (follow.body as ReadableStream<Uint8Array>).getReader();
  const got: Buffer[] = [];
  while (!Buffer.concat(got).toString().includes("line 005")) {
    const { value, done } = await reader.read();
    assert.ok(!done, "the writer's output ended before line 5");
    got.push(Buffer.from(value));
  }
  pauseSupervisor();
  killCoordinator(2);
  // The stream through the dead coordinator ends (broken); what it gave before counts.
  for (;;) {
    const r = await reader.read().catch(() => ({ done: true, value: undefined }));
    if (r.done) break;
    got.push(Buffer.from(r.value as Uint8Array));
  }
  const before = Buffer.concat(got);
  assert.ok(before.length < EXPECTED.length, "coordinator 2 died before the writer ended");

  // Resumed through coordinator 3 from the offset reached: the rest, to the end.
  const rest = await on(3, `/processes/${writer}/output?stream=stdout&follow=true&offset=${before.length}`);
  assert.equal(rest.status, 200);
  assert.equal(rest.headers.get("x-output-start"), "0");
  const followed = Buffer.concat([before, Buffer.from(await rest.arrayBuffer())]).toString();
  // Its end through coordinator 1, and the whole output read at once.
  const waited = await json(1, `/processes/${writer}/wait`, {});
  const whole = await on(1, `/processes/${writer}/output?stream=combined`);
  const wholeText = await whole.text();
  const status = await json(3, `/processes/${writer}`);

  // stdin and kill of processes coordinator 2 started, through the others.
  const stdin = await on(3, `/processes/${cat}/stdin?eof=true`, {
    method: "POST",
    body: "hello across coordinators\n",
    headers: { "content-type": "application/octet-stream" },
  });
  assert.equal(((await stdin.json()) as { written: number }).written, 26);
  const catEnd = await json(1, `/processes/${cat}/wait`, {});
  const catOut = await (await on(3, `/processes/${cat}/output?stream=stdout`)).text();
  await json(1, `/processes/${sleeper}/kill`, {});
  const sleeperEnd = await json(3, `/processes/${sleeper}/wait`, { timeout_seconds: 60 });

  // The Python SDK: a wait and a stream in flight on coordinator 3 when it dies resume on coordinator 1.
  const failover = await startFailover([coordinators[2] as string, coordinators[0] as string]);
  td.defer(() => failover.close());
  const mark = join(up.appDir, "sdk-started");
  const sdk = up.python(["sb.py", "wait", sid, mark], 240_000, { ...env, BERTH_URL: failover.url });
  await waitFor(() => existsSync(mark), {
    timeoutMs: 120_000,
    what: "the SDK's process to print its first line",
  });
  killCoordinator(3);
  const sdkResult = result(await sdk);
  const sdkPid = Number(readFileSync(mark, "utf8"));
  const sdkLines = Array.from({ length: 12 }, (_, i) => `tick ${i + 1}\n`);

  const listed = (await json(1, "/processes")).processes as {
    pid: number;
    status: string;
    exit_code: number;
  }[];
  const checks: [pid: number, right: boolean][] = [
    [
      writer,
      followed === EXPECTED &&
        wholeText === EXPECTED &&
        waited.exit_code === 7 &&
        waited.status === "exited" &&
        status.status === "exited" &&
        status.exit_code === 7,
    ],
    [cat, catEnd.exit_code === 0 && catEnd.status === "exited" && catOut === "hello across coordinators\n"],
    [sleeper, sleeperEnd.exit_code === 137 && sleeperEnd.status === "killed"],
    [sdkPid, sdkResult.code === 3 && JSON.stringify(sdkResult.lines) === JSON.stringify(sdkLines)],
  ];
  const seen: SeenTask[] = checks.map(([pid]) => {
    const p = listed.find((x) => x.pid === pid);
    return {
      id: `process ${pid}`,
      status: p && p.status !== "running" ? "COMPLETE" : "RUNNING",
      attempts: 1,
    };
  });
  // Each check alone first, so a failure says which.
  assert.equal(followed, EXPECTED, "the followed output: every byte, in order");
  assert.equal(wholeText, EXPECTED, "the whole output read through another coordinator");
  assert.deepEqual([waited.exit_code, waited.status, status.status], [7, "exited", "exited"]);
  assert.deepEqual([catEnd.exit_code, catOut], [0, "hello across coordinators\n"]);
  assert.deepEqual([sleeperEnd.exit_code, sleeperEnd.status], [137, "killed"]);
  assert.deepEqual([sdkResult.code, sdkResult.lines], [3, sdkLines]);
  assertFaultSummary(
    t,
    "coordinator SIGKILL during a sandbox exec",
    tallyTasks(seen, { wrong: checks.filter(([, right]) => !right).length }),
  );
});
