// A container's Outputs end to end without runc: the Python SDK's Output
// talks to a real agent BridgeServer on a unix socket, whose
// OutputRelayClient sends the file in chunks over a real nats-server as the
// restricted `agent` NATS user; the coordinator's relay router (the outputs
// area's ops) writes it to the output store under the workspace the agent
// gave the bridge. The signed URL then serves it without a token.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { OutputRelayClient } from "../../agent/bridge/output-relay.ts";
import { BridgeServer } from "../../agent/bridge/server.ts";
import { outputPublicRoutes } from "../../coordinator/outputs/routes.ts";
import { OutputStore } from "../../coordinator/outputs/output-store.ts";
import { serveOutputOps } from "../../coordinator/outputs/relay-ops.ts";
import { RelayRouter } from "../../coordinator/streams/relay-router.ts";
import { tempDir } from "../helpers/env.ts";
import { connectTestNats, startTestNats } from "../helpers/nats.ts";
import { routesApp } from "../helpers/routes-app.ts";

const execp = promisify(execFile);
const SDK = join(import.meta.dirname, "../../sdk/python");

const SCRIPT = `
import json, os, sys
from berth.api.output import Output
from berth.errors import BerthError
work = sys.argv[1]
big = os.path.join(work, "big.bin")
with open(big, "wb") as f:
    f.write(bytes(range(256)) * 6000)          # 1.5 MB: three NATS chunks
os.makedirs(os.path.join(work, "dir", "sub"))
with open(os.path.join(work, "dir", "sub", "x.txt"), "w") as f:
    f.write("in a directory")
out = Output(path=big)
before = out.exists()
out.save()
url = out.public_url(expires=600)
stat = out.stat()
d = Output(path=os.path.join(work, "dir")).save()
try:
    Output(path=os.path.join(work, "missing")).save()
    missing = "saved"
except BerthError as e:
    missing = e.code
print(json.dumps({"id": out.id, "before": before, "exists": out.exists(), "url": url, "stat": stat,
                  "dir": d.stat()["name"], "missing": missing}))
`;

test("a container's Output goes through its agent's bridge and the NATS relay to the store", async (t) => {
  const nats = await startTestNats(t);
  const coordNc = await connectTestNats(t, nats, "coordinator");
  const agentNc = await connectTestNats(t, nats, "agent");
  const dir = tempDir(t);
  const store = new OutputStore({
    root: join(dir, "outputs"),
    signingKey: Buffer.alloc(32, 1),
    publicUrl: "http://c",
  });
  const relay = new RelayRouter(coordNc, { error() {} });
  serveOutputOps(relay, store);
  relay.start();
  t.after(() => relay.stop());
  await coordNc.flush();

  const socket = join(dir, "agent.sock");
  const client = new OutputRelayClient(agentNc, "agent-1");
  const bridge = new BridgeServer(
    socket,
    "ctr-1",
    () => undefined,
    { error() {} },
    { workspaceId: "ws-a", relay: () => undefined },
    () => client,
  );
  await bridge.listen();
  t.after(() => bridge.close());

  const { stdout } = await execp("python3", ["-c", SCRIPT, dir], {
    env: {
      ...process.env,
      PYTHONPATH: SDK,
      BERTH_REMOTE: "1",
      BERTH_AGENT_SOCKET: socket,
      BERTH_TASK_ID: "task-7",
    },
  });
  const r = JSON.parse(stdout) as {
    id: string;
    before: boolean;
    exists: boolean;
    url: string;
    stat: { size: number; name: string; expires_at: string };
    dir: string;
    missing: string;
  };
  assert.equal(r.before, false);
  assert.equal(r.exists, true);
  assert.equal(r.stat.size, 256 * 6000);
  assert.equal(r.stat.name, "big.bin");
  assert.ok(r.stat.expires_at);
  assert.equal(r.dir, "dir.tar.gz");
  assert.equal(r.missing, "invalid_request");
  assert.deepEqual(
    (await store.ofTask("ws-a", "task-7")).map((o) => o.name),
    ["big.bin", "dir.tar.gz"],
  );
  assert.deepEqual(await store.ofTask("ws-b", "task-7"), []);

  const app = routesApp();
  await app.register(outputPublicRoutes(store));
  t.after(() => app.close());
  const got = await app.inject({ method: "GET", url: r.url.slice("http://c".length) });
  assert.equal(got.statusCode, 200);
  const want = Buffer.alloc(256 * 6000);
  for (let i = 0; i < want.length; i++) want[i] = i % 256;
  assert.ok(got.rawPayload.equals(want), "the bytes served are the bytes saved");
});
