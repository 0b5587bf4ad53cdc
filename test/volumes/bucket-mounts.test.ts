// Cloud bucket mounts on a real agent (runc, s3fs, FUSE) reached over its
// gRPC API, against an S3 server on loopback (s3rver): a container reads an
// object and writes one back; a read_only bucket refuses writes inside the
// container; wrong keys, a missing bucket and an unreachable endpoint fail
// the start with a reason naming the bucket and never the key; every
// mount, s3fs process and key file is gone when the container stops, exits,
// or fails to start, and after an agent restart for containers that ended
// meanwhile (a live one keeps its bucket until it stops).

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import type { RunContainerRequest } from "../../api/index.ts";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { isBerthError } from "../../shared/errors.ts";
import { freePort } from "../../shared/net.ts";
import { waitUntil } from "../helpers/wait.ts";
import { needs, unavailable } from "../helpers/env.ts";
import { realAgent } from "../helpers/real-agent.ts";
import { startTestS3 } from "../helpers/s3.ts";
import { execAll, HOST_COMMANDS, MiB } from "../host/harness.ts";

/** s3fs processes serving a mountpoint under `dir`. */
function s3fsUnder(dir: string): number[] {
  const out: number[] = [];
  for (const p of readdirSync("/proc")) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const argv = readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0");
      if (argv[0]?.endsWith("s3fs") && argv.some((a) => a.startsWith(`${dir}/`))) out.push(Number(p));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

test("cloud bucket mounts", { timeout: 300_000 }, async (t) => {
  if (!needs(t, { root: true, commands: [...HOST_COMMANDS, "s3fs"] })) return;
  if (!existsSync("/dev/fuse")) return void unavailable(t, "needs /dev/fuse (FUSE) for s3fs");
  const { h, client } = await realAgent(t);
  const s3 = await startTestS3(t, ["raw-data", "scratch"]);
  await s3.put("raw-data", "hello.txt", "hello from s3\n");
  const bucketsDir = join(h.dir, "host", "buckets");
  const keys = { endpoint: s3.endpoint, region: s3.region, accessKey: s3.accessKey, secretKey: s3.secretKey };
  const base = (id: string): RunContainerRequest => ({
    id,
    image: h.imageRef,
    args: ["sleep", "300"],
    cwd: "/srv",
    cpu: 0.5,
    memoryBytes: 128 * MiB,
  });
  const noneLeft = (id: string) => {
    assert.deepEqual(mountsUnder(join(bucketsDir, id)), [], "no bucket mount may be left");
    assert.ok(!existsSync(join(bucketsDir, id)), "the container's bucket directory is removed");
    assert.deepEqual(s3fsUnder(join(bucketsDir, id)), [], "no s3fs may be left");
    assert.deepEqual(
      readdirSync(bucketsDir).filter((n) => n.startsWith(".creds-")),
      [],
      "no key file may be left",
    );
  };

  await t.test(
    "reads an object, writes one back; read_only refuses writes inside the container",
    async () => {
      const id = "bucket-rw-ro";
      await client.runContainer({
        ...base(id),
        buckets: [
          { name: "raw-data", mountPath: "./raw", readOnly: true, ...keys },
          { name: "scratch", mountPath: "/data/scratch", ...keys },
        ],
      });
      try {
        const read = await execAll(await client.exec(id, { args: ["cat", "/srv/raw/hello.txt"] }));
        assert.equal(read.code, 0, read.stderr);
        assert.equal(read.stdout, "hello from s3\n");
        const ro = await execAll(await client.exec(id, { args: ["sh", "-c", "echo x > /srv/raw/new.txt"] }));
        assert.notEqual(ro.code, 0, "a write to a read_only bucket must fail");
        assert.match(ro.stderr, /Read-only file system/);
        assert.equal((await s3.get("raw-data", "new.txt")).status, 404);
        const rw = await execAll(
          await client.exec(id, {
            args: ["sh", "-c", "echo written in the container > /data/scratch/out.txt"],
          }),
        );
        assert.equal(rw.code, 0, rw.stderr);
        // s3fs uploads a file when it is closed, before the write's close returns.
        assert.deepEqual(await s3.get("scratch", "out.txt"), {
          status: 200,
          body: "written in the container\n",
        });
        assert.equal(mountsUnder(join(bucketsDir, id)).length, 2);
      } finally {
        await client.stopContainer(id, { graceMs: 0, remove: true });
      }
      noneLeft(id);
    },
  );

  // s3rver checks a SigV4 request's access key, not its signature: the wrong
  // pair has an access key it does not know.
  await t.test("wrong keys fail the start naming the bucket, not the key", async () => {
    const id = "bucket-wrong-keys";
    const wrong = { accessKey: "BERTHWRONGKEY", secretKey: "not-the-secret-key-0123456789" };
    const err = await client
      .runContainer({
        ...base(id),
        buckets: [{ name: "raw-data", mountPath: "./raw", ...keys, ...wrong }],
      })
      .then(
        () => assert.fail("the start must fail"),
        (e: unknown) => e,
      );
    assert.ok(isBerthError(err), String(err));
    assert.equal(err.code, "permission_denied", err.message);
    assert.match(
      err.message,
      /cloud bucket raw-data: the access key or secret key was refused at http:\/\/127\.0\.0\.1:\d+/,
    );
    assert.ok(
      !err.message.includes(wrong.accessKey) && !err.message.includes(wrong.secretKey),
      "no key in the error",
    );
    assert.equal(
      (await client.listContainers()).find((c) => c.id === id),
      undefined,
    );
    noneLeft(id);
    assert.ok(!h.logs.some((l) => l.line.includes(wrong.secretKey)), "no key in the container logs");
  });

  await t.test("a missing bucket fails the start with not_found naming it", async () => {
    const id = "bucket-missing";
    const err = await client
      .runContainer({ ...base(id), buckets: [{ name: "no-such-bucket", mountPath: "/b", ...keys }] })
      .then(
        () => assert.fail("the start must fail"),
        (e: unknown) => e,
      );
    assert.ok(isBerthError(err), String(err));
    assert.equal(err.code, "not_found", err.message);
    assert.match(err.message, /cloud bucket no-such-bucket: no such bucket at http:\/\/127\.0\.0\.1/);
    noneLeft(id);
  });

  await t.test("an endpoint nobody answers fails the start with unavailable naming the bucket", async () => {
    const id = "bucket-unreachable";
    const closed = `http://127.0.0.1:${await freePort()}`;
    const err = await client
      .runContainer({
        ...base(id),
        buckets: [{ name: "raw-data", mountPath: "/b", ...keys, endpoint: closed }],
      })
      .then(
        () => assert.fail("the start must fail"),
        (e: unknown) => e,
      );
    assert.ok(isBerthError(err), String(err));
    assert.equal(err.code, "unavailable", err.message);
    assert.match(
      err.message,
      new RegExp(`cloud bucket raw-data: cannot reach ${closed.replaceAll(".", "\\.")}`),
    );
    noneLeft(id);
  });

  await t.test("a container that exits on its own leaves no mount behind", async () => {
    const id = "bucket-exits";
    await client.runContainer({
      ...base(id),
      args: ["cat", "/b/hello.txt"],
      buckets: [{ name: "raw-data", mountPath: "/b", readOnly: true, ...keys }],
    });
    const exit = await h.exitOf(id);
    assert.equal(exit.status.exitCode, 0);
    await waitUntil(() => !existsSync(join(bucketsDir, id)), {
      what: "the exited container's buckets unmounted",
    });
    noneLeft(id);
    assert.ok(h.logs.some((l) => l.containerId === id && l.line === "hello from s3"));
    await client.stopContainer(id, { graceMs: 0, remove: true });
  });

  await t.test(
    "a restarted agent unmounts the buckets of containers that ended while it was down",
    async () => {
      const id = "bucket-restart";
      const live = "bucket-restart-live";
      await client.runContainer({ ...base(id), buckets: [{ name: "raw-data", mountPath: "/b", ...keys }] });
      await client.runContainer({
        ...base(live),
        buckets: [{ name: "raw-data", mountPath: "/b", readOnly: true, ...keys }],
      });
      assert.equal(mountsUnder(join(bucketsDir, id)).length, 1);
      h.host.close();
      execFileSync("runc", ["--root", join(h.dir, "containers", ".runc"), "kill", id, "KILL"]);
      await waitUntil(
        () => {
          const out = execFileSync("runc", [
            "--root",
            join(h.dir, "containers", ".runc"),
            "state",
            id,
          ]).toString();
          return JSON.parse(out).status === "stopped";
        },
        { what: "the container stopped" },
      );
      await h.restart();
      noneLeft(id);
      await h.host.stopContainer(id, { graceMs: 0, remove: true });
      // A container that lived through the restart keeps its bucket, and loses it when it stops.
      const read = await execAll(await h.host.exec(live, { args: ["cat", "/b/hello.txt"] }));
      assert.equal(read.stdout, "hello from s3\n", read.stderr);
      await h.host.stopContainer(live, { graceMs: 0, remove: true });
      noneLeft(live);
    },
  );
});
