// Issue 6's "Done when", from Python against a real `berth up` cluster: a
// sandbox runs `python3 -c "print(1+1)"`, takes an uploaded file and finds a
// pattern in it, serves `python3 -m http.server` at its exposed URL (fetched
// with curl), loses its outbound network while the URL still answers, and
// its filesystem snapshot starts a second sandbox that sees the file; a pod
// running `python3 -m http.server` answers at its URL.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { waitFor } from "../../shared/net.ts";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { PROBE, Teardown, createOutside, listenIn, randomPort } from "../network/helpers.ts";

const execp = promisify(execFile);

const SCRIPT = `
import json, sys
from berth import Image, Pod, Sandbox

PROBE = ${JSON.stringify(PROBE)}

def out(**kw):
    print("RESULT " + json.dumps(kw), flush=True)

def probe(sb, host, port):
    p = sb.process.exec("python3", "-c", PROBE, host, str(port))
    p.wait()
    return p.stdout.read().strip()

step = sys.argv[1]
if step == "create":
    sb = Sandbox(cpu=0.5, memory=256).create()
    p = sb.process.exec("python3", "-c", "print(1+1)")
    code = p.wait()
    two = p.stdout.read()
    with open("notes.txt", "w") as f:
        f.write("alpha\\nthe needle is here\\nomega\\n")
    sb.fs.upload_file("notes.txt", "/work/notes.txt")
    matches = sb.fs.find_in_files("/work", "needle")
    server = sb.process.exec("python3", "-m", "http.server", "8000", cwd="/work")
    url = sb.expose_port(8000)
    out(id=sb.sandbox_id(), code=code, two=two, matches=[m.path for m in matches],
        lines=[m.range.start.line for m in matches], url=url, server_pid=server.pid,
        probe=probe(sb, sys.argv[2], sys.argv[3]))
elif step == "block":
    sb = Sandbox().connect(sys.argv[2])
    sb.update_network_permissions(block_network=True)
    out(probe=probe(sb, sys.argv[3], sys.argv[4]), urls={str(k): v for k, v in sb.list_urls().items()})
elif step == "snapshot":
    sb = Sandbox().connect(sys.argv[2])
    image_id = sb.create_image_from_filesystem()
    sb2 = Sandbox(image=Image.from_id(image_id)).create()
    p = sb2.process.exec("cat", "/work/notes.txt")
    p.wait()
    text = p.stdout.read()
    ok = sb.terminate() and sb2.terminate()
    try:
        sb.process.exec("true")
        after = "usable"
    except Exception as e:
        after = type(e).__name__
    out(image_id=image_id, text=text, terminated=ok, after=after)
elif step == "pod":
    r = Pod(entrypoint=["python3", "-m", "http.server", "8000"], ports=[8000], cpu=0.25, memory=128).create()
    out(ok=r.ok, container_id=r.container_id, url=r.url)
`;

const POD_APP = `
from berth import Pod

web = Pod(name="web", entrypoint=["python3", "-m", "http.server", "8000"], ports=[8000], cpu=0.25, memory=128)
`;

const result = (stdout: string) => {
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(line, `no RESULT line in:\n${stdout}`);
  return JSON.parse(line.slice(7)) as Record<string, unknown>;
};

async function curl(url: string): Promise<{ code: number; body: string }> {
  try {
    const { stdout } = await execp("curl", ["-sS", "--max-time", "10", "-w", "\n%{http_code}", url]);
    const at = stdout.lastIndexOf("\n");
    return { code: Number(stdout.slice(at + 1)), body: stdout.slice(0, at) };
  } catch (e) {
    return { code: 0, body: String(e) };
  }
}

test("sandboxes and pods end to end on a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "curl"] })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const outside = await createOutside(td, up.names);
  const port = randomPort();
  await listenIn(td, outside.netns, port, "outside-ok");
  writeFileSync(join(up.appDir, "sbx.py"), SCRIPT);
  const py = async (...args: string[]) => result(await up.python(["sbx.py", ...args]));

  let id = "";
  let url = "";
  await t.test("exec, upload and find, an exposed http.server fetched with curl", async () => {
    const r = await py("create", outside.primary4, String(port));
    id = r.id as string;
    url = r.url as string;
    assert.match(id, /^ctr-/);
    assert.equal(r.code, 0);
    assert.equal(r.two, "2\n");
    assert.deepEqual(r.matches, ["/work/notes.txt"]);
    assert.deepEqual(r.lines, [2]);
    assert.equal(r.probe, "OK outside-ok", "an open sandbox reaches the outside listener");
    let got = { code: 0, body: "" };
    await waitFor(
      async () => {
        got = await curl(url);
        return got.code === 200;
      },
      { timeoutMs: 30_000, what: `the exposed URL ${url}` },
    );
    assert.match(got.body, /notes\.txt/);
  });

  await t.test("block_network: the outbound request fails while the exposed URL still answers", async () => {
    const r = await py("block", id, outside.primary4, String(port));
    assert.match(String(r.probe), /^FAIL/, String(r.probe));
    assert.equal((r.urls as Record<string, string>)["8000"], url);
    const got = await curl(url);
    assert.equal(got.code, 200);
    assert.match(got.body, /notes\.txt/);
  });

  await t.test("a filesystem snapshot starts a second sandbox that sees the file", async () => {
    const r = await py("snapshot", id);
    assert.match(String(r.image_id), /^img-/);
    assert.equal(r.text, "alpha\nthe needle is here\nomega\n");
    assert.equal(r.terminated, true);
    assert.equal(r.after, "SandboxConnectionError");
    assert.notEqual((await curl(url)).code, 200, "a terminated sandbox's URL is gone");
  });

  await t.test("a pod running python3 -m http.server answers at its URL", async () => {
    const r = await py("pod");
    assert.equal(r.ok, true);
    assert.match(String(r.container_id), /^ctr-/);
    let got = { code: 0, body: "" };
    await waitFor(
      async () => {
        got = await curl(String(r.url));
        return got.code === 200;
      },
      { timeoutMs: 30_000, what: `the pod's URL ${r.url}` },
    );
    assert.match(got.body, /Directory listing/);
  });

  await t.test("berth deploy app.py:pod prints a URL that serves the pod's port", async () => {
    writeFileSync(join(up.appDir, "pod_app.py"), POD_APP);
    const d = await up.cli(["deploy", "pod_app.py:web"]);
    assert.equal(d.code, 0, d.stdout + d.stderr);
    const podUrl = /(https?:\/\/\S+\/endpoint\/\S+)/.exec(d.stdout)?.[1];
    assert.ok(podUrl, d.stdout);
    let got = { code: 0, body: "" };
    await waitFor(
      async () => {
        got = await curl(podUrl);
        return got.code === 200;
      },
      { timeoutMs: 120_000, what: `the deployed pod's URL ${podUrl}` },
    );
    assert.match(got.body, /Directory listing/);
  });
});
