// More beta9 programs (only the import renamed) through the real SDK on one
// real `berth up` cluster: beta9's Pod docstring prints an id and a URL; a
// pod whose entrypoint finishes at once is a pod that ran, with its status
// and exit code readable through the SDK and the gateway routes; a function
// and a pod write in their working directory (/mnt/code), and another
// container of the same code does not see it; the function saves what it
// wrote as an Output whose public URL serves it; pool= keeps work to one
// pool's agents and refuses a pool the fleet lacks; Outputs save a directory
// as a zip, from a file handle, and stat() as beta9's.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const APP = `
import json, os, sys
from berth import Image, Output, Pod, Sandbox, endpoint, function, task_queue

@function(cpu="100m", memory="100Mi", pool="default")
def in_default_pool():
    return "ran"

@function(cpu="100m", pool="h100-pool")
def in_missing_pool():
    return "never"

@task_queue(name="b9-pool-jobs", cpu="100m", pool="h100-pool")
def pool_jobs(n):
    return n

@function(cpu="100m", image=Image(pool="h100-pool").add_commands(["true"]))
def built_in_missing_pool():
    return "never"

@function(cpu="100m", memory="100Mi")
def publish_outputs():
    os.makedirs("results/plots", exist_ok=True)
    with open("results/summary.txt", "w") as f:
        f.write("done")
    with open("results/plots/a.csv", "w") as f:
        f.write("1,2")
    folder = Output(path="results")
    folder.save()
    with open("results/summary.txt", "rb") as f:
        handle = Output.from_file(f)
    handle.save()
    st = folder.stat()
    return {
        "name": st.name, "size": st.size, "mode": st.mode, "mtime": st.mtime.isoformat(),
        "exists": folder.exists(), "url": folder.public_url(expires=600),
        "from_file": [handle.stat().size, handle.public_url(expires=600)],
    }

@endpoint(name="b9-pool-ep", cpu="100m", pool="h100-pool")
def pool_endpoint(**inputs):
    return inputs

@function(cpu="100m", memory="100Mi")
def write_here(text):
    with open("out.txt", "w") as f:
        f.write(text)
    output = Output(path="out.txt")
    output.save()
    with open("out.txt") as f:
        return {"cwd": os.getcwd(), "read": f.read(), "url": output.public_url(expires=400)}

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "docstring-pod":
        # beta9's Pod docstring, word for word but the import.
        image = Image()
        pod = Pod(cpu=2, memory=512, image=image, ports=[8080])
        result = pod.create(entrypoint=["python", "-c", "\\"print('Hello, World!')\\""])
        print(result.container_id)
        print(result.url)
    elif case == "finished-pod":
        r = Pod(cpu="100m", memory="100Mi").create(entrypoint=["python", "-c", "print('batch done')"])
        print("finished-pod:", r.ok, r.container_id, r.status, r.exit_code, json.dumps(r.error_msg))
        print("refreshed:", r.refresh().status, r.exit_code)
        print("terminate:", r.terminate())
    elif case == "write":
        print("write:", json.dumps(write_here("hello")))
        writer = Pod(cpu="100m", memory="100Mi").create(entrypoint=["python", "-c", "open('pod-out.txt','w').write('x')"])
        print("writer:", writer.ok, writer.exit_code, json.dumps(writer.error))
        reader = Pod(cpu="100m", memory="100Mi").create(
            entrypoint=["python", "-c", "import os, sys; sys.exit(7 if os.path.exists('pod-out.txt') or os.path.exists('out.txt') else 0)"])
        print("reader:", reader.ok, reader.exit_code, json.dumps(reader.error))
    elif case == "pools":
        print("default-pool:", in_default_pool())
        try:
            in_missing_pool()
        except Exception as e:
            print("function:", type(e).__name__, json.dumps(str(e)))
        task = pool_jobs.put(1)
        print("queue-task:", task.id)
        try:
            task.result()
        except Exception as e:
            print("queue:", type(e).__name__, json.dumps(str(e)))
        try:
            Sandbox(cpu="100m", pool="h100-pool").create()
        except Exception as e:
            print("sandbox:", type(e).__name__, json.dumps(str(e)))
        r = Pod(cpu="100m", pool="h100-pool", entrypoint=["python", "-c", "pass"]).create()
        print("pod:", r.ok, r.code, json.dumps(r.error))
        try:
            built_in_missing_pool()
        except Exception as e:
            print("image:", type(e).__name__, json.dumps(str(e)))
    elif case == "outputs":
        print("outputs:", json.dumps(publish_outputs()))
    elif case == "later-pod":
        r = Pod(cpu="100m", memory="100Mi").create(entrypoint=["python", "-c", "import time, sys; time.sleep(4); sys.exit(5)"])
        print("later-pod:", r.ok, r.container_id, r.status, r.exit_code)
        print("waited:", r.wait(timeout=120, interval=0.5), r.status)
`;

test("more beta9 programs run unchanged through the SDK on a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  writeFileSync(join(up.appDir, "app.py"), APP);
  const py = (scenario: string) => up.python(["app.py", scenario]);

  // First, while nothing else holds the agent's CPUs: the pod asks for 2.
  await t.test("beta9's Pod docstring program prints the pod's id and URL", async () => {
    const out = await py("docstring-pod");
    const id = /^(ctr-\S+)$/m.exec(out)?.[1];
    assert.ok(id, out);
    const url = /^(https?:\/\/\S+)$/m.exec(out)?.[1];
    assert.ok(url, out);
    assert.ok(url.includes(id) && url.includes("8080"), `the URL is the pod's port 8080: ${url}`);
  });

  await t.test("a pod whose entrypoint exits 0 at once ran: ok, its id, status and exit code", async () => {
    const out = await py("finished-pod");
    const m = /^finished-pod: True (ctr-\S+) terminated 0 ""$/m.exec(out);
    assert.ok(m, out);
    assert.match(out, /^refreshed: terminated 0$/m, out);
    assert.match(out, /^terminate: False$/m, "it had ended already");
    assert.doesNotMatch(out, /did not start/, out);
    const r = await up.api(`/api/v1/gateway/pods/${m[1]}`);
    const body = (await r.json()) as { ok: boolean; status: string; exit_code: number | null };
    assert.deepEqual([body.ok, body.status, body.exit_code], [true, "terminated", 0], JSON.stringify(body));
  });

  await t.test(
    "a function writes in its working directory; another container of the code does not see it",
    async () => {
      const out = await py("write");
      const line = /^write: (.*)$/m.exec(out)?.[1];
      assert.ok(line, out);
      const wrote = JSON.parse(line) as { cwd: string; read: string; url: string };
      assert.deepEqual([wrote.cwd, wrote.read], ["/mnt/code", "hello"], out);
      const served = await fetch(wrote.url);
      assert.equal(served.status, 200, wrote.url);
      assert.equal(await served.text(), "hello", "the Output's public URL serves out.txt");
      assert.match(out, /^writer: True 0 ""$/m, out);
      assert.match(out, /^reader: True 0 ""$/m, "a second container of the same code sees neither file");
    },
  );

  await t.test("pool=: placed only in that pool; an unknown pool refused at once on every path", async () => {
    const out = await py("pools");
    assert.match(out, /^default-pool: ran$/m, out);
    const named = (label: string) => {
      const line = new RegExp(`^${label}: (.*)$`, "m").exec(out)?.[1] ?? out;
      assert.match(line, /pool \\?"h100-pool\\?"/, `${label}: ${line}`);
      assert.match(line, /the fleet has pools: default/, `${label}: ${line}`);
      return line;
    };
    named("function");
    named("queue");
    named("sandbox");
    assert.match(named("pod"), /^False unplaceable /);
    named("image");
    const id = /^queue-task: (\S+)$/m.exec(out)?.[1];
    assert.ok(id, out);
    const task = (await (await up.api(`/v2/task/${id}/`)).json()) as { status: string };
    assert.equal(task.status, "FAILED", "no task stuck in PENDING");
    const deployed = await up.cli(["deploy", "app.py:pool_endpoint"]);
    assert.match(deployed.stderr, /warning.*pool "h100-pool"/i, deployed.stderr);
    const r = await up.api("/endpoint/b9-pool-ep", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: "{}",
    });
    const text = await r.text();
    assert.equal(r.status, 422, text);
    assert.match(text, /"code":"unplaceable"/, text);
    assert.match(text, /pool \\"h100-pool\\"/, text);
    const agents = await up.cli(["agent", "list", "--json"]);
    const listed = JSON.parse(agents.stdout) as { pool: string | null }[];
    assert.deepEqual(
      listed.map((a) => a.pool),
      ["default"],
      agents.stdout,
    );
  });

  await t.test(
    "Output: a directory saved as a zip, from_file, stat() and exists() with beta9's names",
    async () => {
      const out = await py("outputs");
      const line = /^outputs: (.*)$/m.exec(out)?.[1];
      assert.ok(line, out);
      const r = JSON.parse(line) as {
        name: string;
        size: number;
        mode: string;
        mtime: string;
        exists: boolean;
        url: string;
        from_file: [number, string];
      };
      assert.equal(r.name, "results.zip");
      assert.ok(r.size > 0);
      assert.match(r.mode, /^-r/);
      assert.match(r.mtime, /^\d{4}-/);
      assert.equal(r.exists, true);
      assert.equal(r.from_file[0], "done".length);
      const zip = Buffer.from(await (await fetch(r.url)).arrayBuffer());
      const zipPath = join(up.appDir, "results.zip");
      writeFileSync(zipPath, zip);
      const listed = await up.python([
        "-c",
        "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print(sorted(z.namelist()))",
        zipPath,
      ]);
      assert.match(listed, /\['plots\/a\.csv', 'summary\.txt'\]/, listed);
      assert.equal(await (await fetch(r.from_file[1])).text(), "done");
    },
  );

  await t.test("a pod that runs, then exits non-zero: wait() answers its exit code", async () => {
    const out = await py("later-pod");
    assert.match(out, /^later-pod: True ctr-\S+ running None$/m, out);
    assert.match(out, /^waited: 5 terminated$/m, out);
  });
});
