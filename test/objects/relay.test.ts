// A container's Queue, Map and Signal calls end to end without runc: the
// Python SDK (as the runtime installs it, BERTH_REMOTE=1) talks to a real
// agent BridgeServer on a unix socket, whose StateRelayClient asks over a
// real nats-server as the restricted `agent` NATS user; the coordinator's
// relay router answers with the state area's ops, from JetStream. The
// workspace is the one the agent gave the bridge: the container cannot reach
// another's.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { BridgeServer } from "../../agent/bridge/server.ts";
import { StateRelayClient } from "../../agent/bridge/state-relay.ts";
import { MapStore } from "../../coordinator/state/maps.ts";
import { QueueStore } from "../../coordinator/state/queues.ts";
import { serveStateOps } from "../../coordinator/state/relay-ops.ts";
import { SignalStore } from "../../coordinator/state/signals.ts";
import { StateObjects } from "../../coordinator/state/state.ts";
import { RelayRouter } from "../../coordinator/streams/relay-router.ts";
import { tempDir } from "../helpers/env.ts";
import { connectTestNats, startTestNats } from "../helpers/nats.ts";
import { waitUntil } from "../helpers/wait.ts";

const SDK = join(import.meta.dirname, "../../sdk/python");

const SCRIPT = `
import sys, threading
from berth.api.signal import Signal
from berth.api.state import Map, Queue
from berth.runtime.state_bridge import install_from_env
install_from_env()  # as the runner does before it imports the user's module
q = Queue("jobs")
for i in range(5):
    q.put({"n": i})
print("SIZE", q.size(), flush=True)
print("POP", q.pop()["n"], flush=True)
m = Map("seen")
m["a.b"] = [1, 2]
m["x"] = "y"
del m["x"]
print("MAP", sorted(m.keys()), m["a.b"], len(m), "x" in m, m.get("x", "none"), list(m.items()), flush=True)
print("OTHER", Queue("theirs").pop(), flush=True)
fired = threading.Event()
Signal("reload", handler=lambda: (print("FIRED", flush=True), fired.set()), clear_after_interval=1)
print("READY", flush=True)
if not fired.wait(60):
    sys.exit(3)
# clear_after_interval=1: this container clears it a second after its handler ran.
import time
deadline = time.monotonic() + 30
while Signal("reload").is_set():
    if time.monotonic() > deadline:
        sys.exit(4)
    time.sleep(0.1)
print("CLEARED", flush=True)
`;

test("a container's state calls go through its agent's bridge and NATS relay", async (t) => {
  const nats = await startTestNats(t);
  const coordNc = await connectTestNats(t, nats, "coordinator");
  const agentNc = await connectTestNats(t, nats, "agent");
  const state = new StateObjects(
    new QueueStore({ nc: coordNc }),
    new MapStore(coordNc),
    new SignalStore(coordNc),
  );
  await state.signals.start();
  t.after(() => state.signals.stop());
  const relay = new RelayRouter(coordNc, { error() {} });
  serveStateOps(relay, state);
  relay.start();
  t.after(() => relay.stop());
  await coordNc.flush();

  const dir = tempDir(t);
  const socket = join(dir, "agent.sock");
  const client = new StateRelayClient(agentNc, "agent-1");
  const bridge = new BridgeServer(
    socket,
    "ctr-1",
    () => undefined,
    { error() {} },
    {
      workspaceId: "ws-a",
      relay: () => client,
    },
  );
  await bridge.listen();
  t.after(() => bridge.close());
  await state.queues.put("ws-b", "theirs", new TextEncoder().encode("not yours"));

  const py = spawn("python3", ["-c", SCRIPT], {
    env: { ...process.env, PYTHONPATH: SDK, BERTH_REMOTE: "1", BERTH_AGENT_SOCKET: socket },
    stdio: ["ignore", "pipe", "pipe"],
  });
  t.after(() => {
    if (py.exitCode === null) py.kill("SIGKILL");
  });
  let stderr = "";
  py.stderr.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<number | null>((r) => py.once("exit", (c) => r(c)));
  const lines: string[] = [];
  createInterface({ input: py.stdout }).on("line", (line) => lines.push(line));
  await Promise.race([
    waitUntil(() => lines.includes("READY"), {
      what: "the script's READY",
      timeoutMs: 30_000,
      describe: () => stderr,
    }),
    exited,
  ]);
  assert.deepEqual(
    lines,
    ["SIZE 5", "POP 0", "MAP ['a.b'] [1, 2] 1 False none [('a.b', [1, 2])]", "OTHER None", "READY"],
    stderr,
  );
  // What the container wrote is in workspace ws-a, and only there.
  assert.equal(await state.queues.size("ws-a", "jobs"), 4);
  assert.deepEqual(await state.maps.keys("ws-b", "seen"), []);
  assert.equal(await state.queues.size("ws-b", "theirs"), 1);

  await state.signals.set("ws-a", "reload", 60);
  assert.equal(await exited, 0, stderr);
  assert.deepEqual(lines.slice(5), ["FIRED", "CLEARED"]);
  assert.equal((await state.signals.state("ws-a", "reload")).set, false);
});
