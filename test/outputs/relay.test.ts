// A container's Outputs end to end without runc: the Python SDK's Output
// talks to a real agent BridgeServer on a unix socket, whose
// OutputRelayClient sends the file in chunks over a real nats-server as the
// restricted `agent` NATS user; the coordinator's relay router (the outputs
// area's ops) writes it to the output store under the workspace the agent
// gave the bridge. The signed URL then serves it without a token.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
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
import io, json, os, sys
from berth.api.output import Output, OutputNotSavedError, Stat
from berth.errors import BerthError
work = sys.argv[1]
big = os.path.join(work, "big.bin")
with open(big, "wb") as f:
    f.write(bytes(range(256)) * 6000)          # 1.5 MB: three NATS chunks
os.makedirs(os.path.join(work, "dir", "sub"))
with open(os.path.join(work, "dir", "sub", "x.txt"), "w") as f:
    f.write("in a directory")
with open(os.path.join(work, "dir", "top.txt"), "w") as f:
    f.write("at the top")
out = Output(path=big)
before = out.exists()
try:
    out.stat()
    unsaved = "answered"
except OutputNotSavedError as e:
    unsaved = e.code
out.save()
url = out.public_url(expires=600)
stat = out.stat()
d = Output(path=os.path.join(work, "dir")).save()
from_file = Output.from_file(io.BytesIO(b"from a file handle")).save()
try:
    Output(path=os.path.join(work, "missing"))
    missing = "made"
except FileNotFoundError:
    missing = "FileNotFoundError"
print(json.dumps({"id": out.id, "before": before, "unsaved": unsaved, "exists": out.exists(), "url": url,
                  "stat": {k: (v.isoformat() if hasattr(v, "isoformat") else v) for k, v in stat.to_dict().items()},
                  "stat_is_stat": isinstance(stat, Stat), "size_by_key": stat["size"], "size_by_attr": stat.size,
                  "dir": d.stat().name, "dir_url": d.public_url(expires=600),
                  "from_file": [from_file.stat().size, from_file.public_url(expires=600)],
                  "from_file_kept": os.path.exists(from_file.path), "missing": missing}))
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
    unsaved: string;
    exists: boolean;
    url: string;
    stat: Record<string, unknown>;
    stat_is_stat: boolean;
    size_by_key: number;
    size_by_attr: number;
    dir: string;
    dir_url: string;
    from_file: [number, string];
    from_file_kept: boolean;
    missing: string;
  };
  assert.equal(r.before, false);
  assert.equal(r.unsaved, "not_found", "stat() before save() is OutputNotSavedError");
  assert.equal(r.exists, true);
  // beta9's Stat fields first (mode, size, atime, mtime), then berth's.
  assert.deepEqual(Object.keys(r.stat), [
    "mode",
    "size",
    "atime",
    "mtime",
    "id",
    "name",
    "created_at",
    "expires_at",
  ]);
  assert.equal(r.stat_is_stat, true);
  assert.equal(r.stat.size, 256 * 6000);
  assert.equal(r.size_by_key, 256 * 6000, 'stat()["size"] still works');
  assert.equal(r.size_by_attr, 256 * 6000);
  assert.match(String(r.stat.mode), /^-r[-w][-x]/);
  assert.match(String(r.stat.mtime), /^\d{4}-\d\d-\d\dT/);
  assert.equal(r.stat.name, "big.bin");
  assert.equal(r.stat.id, r.id);
  assert.ok(r.stat.expires_at);
  assert.equal(r.dir, "dir.zip", "a directory is zipped, as beta9 does");
  assert.equal(r.from_file[0], "from a file handle".length);
  assert.equal(r.from_file_kept, false, "the temporary copy goes once saved");
  assert.equal(r.missing, "FileNotFoundError");
  assert.deepEqual(
    (await store.ofTask("ws-a", "task-7")).map((o) => o.name),
    ["big.bin", "dir.zip", r.from_file[1].split("/").at(-1)?.split("?")[0]],
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
  const zip = await app.inject({ method: "GET", url: r.dir_url.slice("http://c".length) });
  assert.equal(zip.statusCode, 200);
  const zipPath = join(dir, "dir.zip");
  writeFileSync(zipPath, zip.rawPayload);
  const { stdout: listed } = await execp("python3", [
    "-c",
    "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print(sorted(z.namelist())); print(z.read('sub/x.txt').decode())",
    zipPath,
  ]);
  assert.equal(listed, "['sub/x.txt', 'top.txt']\nin a directory\n", "its files, relative to the directory");
  const fromFile = await app.inject({ method: "GET", url: r.from_file[1].slice("http://c".length) });
  assert.equal(fromFile.body, "from a file handle");
});
