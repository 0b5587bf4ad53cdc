// CloudBucket end to end, on a real `berth up` cluster against
// an S3 server on loopback (s3rver in this process, reached by the agent's
// s3fs on the host side): keys go in as workspace secrets with `berth secret
// create`, a function reads an object from a read_only bucket, fails to
// write there, and writes to a read-write bucket; a sandbox and a pod see a
// bucket too; a function whose secrets hold wrong keys fails its task with a
// reason naming the bucket (not the keys), instead of waiting in PENDING.

import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs, unavailable } from "../helpers/env.ts";
import { startTestS3 } from "../helpers/s3.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown } from "../network/helpers.ts";

const APP = `
import json, sys
from berth import CloudBucket, CloudBucketConfig, Pod, Sandbox, Volume, function

def bucket(name, mount_path, key="S3_KEY", secret="S3_SECRET", read_only=False):
    return CloudBucket(name=name, mount_path=mount_path, config=CloudBucketConfig(
        access_key=key, secret_key=secret, endpoint="ENDPOINT", region="us-east-1", read_only=read_only))

@function(volumes=[bucket("raw-data", "./raw", read_only=True), bucket("scratch", "/data/scratch")], cpu=0.25, memory=128)
def read_and_write():
    with open("raw/hello.txt") as f:
        text = f.read()
    try:
        with open("raw/new.txt", "w") as f:
            f.write("x")
        read_only = "the write succeeded"
    except OSError as e:
        read_only = e.strerror
    with open("/data/scratch/out.txt", "w") as f:
        f.write("from a function")
    return {"text": text, "read_only": read_only}

@function(volumes=[bucket("raw-data", "./raw", key="WRONG_KEY", secret="WRONG_SECRET")], cpu=0.25, memory=128)
def wrong_keys():
    return "mounted"

def out(**kw):
    print("RESULT " + json.dumps(kw), flush=True)

if __name__ == "__main__":
    step = sys.argv[1]
    if step == "read":
        out(**read_and_write.remote())
    elif step == "wrong":
        try:
            out(result=wrong_keys.remote())
        except Exception as e:
            out(error=str(e))
    elif step == "sandbox":
        sb = Sandbox(volumes=[bucket("raw-data", "/mnt/raw", read_only=True)], cpu=0.25, memory=128).create()
        p = sb.process.exec("cat", "/mnt/raw/hello.txt")
        code = p.wait()
        out(code=code, text=p.stdout.read())
        sb.terminate()
    elif step == "pod":
        # The pod copies what it reads from the bucket into a Volume the test reads back.
        pod = Pod(entrypoint=["python3", "-c",
            "import time; open('/volumes/seen/pod.txt', 'w').write(open('/srv/raw/hello.txt').read()); time.sleep(600)"],
            volumes=[bucket("raw-data", "/srv/raw", read_only=True), Volume(name="seen", mount_path="/seen")],
            cpu=0.25, memory=128).create()
        out(ok=pod.ok)
`;

const result = (stdout: string) => {
  const line = stdout.split("\n").find((l) => l.startsWith("RESULT "));
  assert.ok(line, `no RESULT line in:\n${stdout}`);
  return JSON.parse(line.slice(7)) as Record<string, unknown>;
};

test("cloud buckets end to end: keys from secrets, read, read_only, a sandbox and a pod, wrong keys fail the task naming the bucket", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "s3fs"] })) return;
  if (!existsSync("/dev/fuse")) return void unavailable(t, "needs /dev/fuse (FUSE) for s3fs");
  const td = new Teardown(t);
  const s3 = await startTestS3({ after: (fn) => td.defer(fn) }, ["raw-data", "scratch"]);
  await s3.put("raw-data", "hello.txt", "hello from s3");
  const up = await startBerthUp(td);
  for (const [name, value] of [
    ["S3_KEY", s3.accessKey],
    ["S3_SECRET", s3.secretKey],
    ["WRONG_KEY", "BERTHWRONGKEY"],
    ["WRONG_SECRET", "wrong-secret-value-42"],
  ] as const) {
    const made = await up.cli(["secret", "create", name, value]);
    assert.equal(made.code, 0, made.stderr);
  }
  writeFileSync(join(up.appDir, "app.py"), APP.replaceAll("ENDPOINT", s3.endpoint));
  const py = async (...args: string[]) => result(await up.python(["app.py", ...args]));
  const agentDir = join(up.dataDir, "agent");

  await t.test(
    "a function reads an object; read_only refuses a write; a read-write bucket takes one",
    async () => {
      const r = await py("read");
      assert.equal(r.text, "hello from s3");
      assert.equal(r.read_only, "Read-only file system");
      assert.equal((await s3.get("raw-data", "new.txt")).status, 404);
      assert.deepEqual(await s3.get("scratch", "out.txt"), { status: 200, body: "from a function" });
    },
  );

  await t.test("a sandbox sees a bucket", async () => {
    const r = await py("sandbox");
    assert.deepEqual(r, { code: 0, text: "hello from s3" });
  });

  await t.test("a pod sees a bucket", async () => {
    const r = await py("pod");
    assert.equal(r.ok, true);
    const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
      .external_id;
    const got = await waitUntil(
      async () => {
        const res = await up.api(`/api/v1/volume/${ws}/seen/files/pod.txt`);
        return res.status === 200 ? res.text() : undefined;
      },
      { what: "the pod's copy of the object", timeoutMs: 30_000, intervalMs: 250 },
    );
    assert.equal(got, "hello from s3");
  });

  await t.test("wrong keys fail the task with a reason naming the bucket, not the keys", async () => {
    const r = await py("wrong");
    assert.equal(r.result, undefined, "the function must not run");
    assert.match(
      String(r.error),
      /cloud bucket raw-data: the access key or secret key was refused at http:\/\/127\.0\.0\.1:\d+/,
    );
    assert.ok(
      !String(r.error).includes("wrong-secret-value-42") && !String(r.error).includes("BERTHWRONGKEY"),
    );
    assert.ok(!up.output().includes("wrong-secret-value-42"), "no key in the cluster's logs");
  });

  await t.test("no bucket mount outlives its container", async () => {
    const sock = join(agentDir, "agent.sock");
    const ps = await up.cli(["agent", "ps", "--all", "--json", "--socket", sock]);
    assert.equal(ps.code, 0, ps.stderr);
    const ids = (JSON.parse(ps.stdout) as { id: string }[]).map((c) => c.id);
    assert.ok(ids.length > 0);
    assert.ok(
      mountsUnder(join(agentDir)).some((m) => m.includes("/buckets/")),
      "the warm containers' buckets are mounted",
    );
    for (const id of ids) await up.cli(["agent", "stop", "--rm", "--grace", "1", "--socket", sock, id]);
    const left = () => mountsUnder(agentDir).filter((m) => m.includes("/buckets/"));
    await waitUntil(() => left().length === 0, {
      what: "every bucket unmounted",
      timeoutMs: 30_000,
      intervalMs: 250,
      describe: () => `left: ${left().join(", ")}`,
    });
  });
});
