// The files API and a container in a user namespace (agent/files/files.ts,
// docs/runtime.md "User namespaces"): ids read as the container sees them,
// what the API writes is root's inside (the container can change it), and a
// volume — seen inside through an idmapped mount the agent cannot write
// through — is written in its own directory, root's on disk and inside.

import assert from "node:assert/strict";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { needs } from "../helpers/env.ts";
import { HOST_COMMANDS, hostHarness, MiB } from "../host/harness.ts";
import { bytesOf, SLEEP, sh } from "./harness.ts";

test("files API in a user-namespaced container: its ids, its /tmp, a volume", async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const h = await hostHarness(t, { volumes: true });
  const c = await h.host.runContainer({
    image: h.imageRef,
    args: SLEEP,
    cpu: 0.25,
    memoryBytes: 128 * MiB,
    volumes: [{ workspaceId: "ws-a", name: "data", mountPath: "/data" }],
  });
  t.after(() => h.host.stopContainer(c.id, { graceMs: 0, remove: true }).catch(() => {}));
  assert.match(await sh(h.host, c.id, "cat /proc/self/uid_map"), /^\s*0\s+\d{8,}\s+65536\s*$/);

  // Its own files: root's inside, and the container may change what the API wrote.
  const made = await h.host.files.writeFile(c.id, "/srv/app/conf.txt", bytesOf("one\n"));
  assert.deepEqual([made.uid, made.gid, made.owner], [0, 0, "root"]);
  await sh(h.host, c.id, "echo two >> /srv/app/conf.txt && chmod 600 /srv/app/conf.txt");
  assert.equal(await sh(h.host, c.id, "cat /srv/app/conf.txt"), "one\ntwo\n");
  const passwd = await h.host.files.statPath(c.id, "/etc/passwd");
  assert.deepEqual([passwd.uid, passwd.owner], [0, "root"], "the image reads as root's");
  // The agent's own files bind-mounted in (resolv.conf) are the host's root's: nobody inside.
  assert.equal((await h.host.files.statPath(c.id, "/etc/resolv.conf")).uid, 65534);

  // Its /tmp, a tmpfs of its own.
  await h.host.files.writeFile(c.id, "/tmp/note", bytesOf("tmp\n"));
  await sh(h.host, c.id, "echo more >> /tmp/note");
  assert.equal(await sh(h.host, c.id, "cat /tmp/note"), "tmp\nmore\n");

  // A volume, at /volumes/data and at its mount path.
  for (const path of ["/volumes/data/a.txt", "/data/b.txt"]) {
    const f = await h.host.files.writeFile(c.id, path, bytesOf(`${path}\n`));
    assert.deepEqual([f.uid, f.gid], [0, 0]);
  }
  await sh(h.host, c.id, "echo inside >> /data/a.txt");
  const onDisk = join(h.dir, "volumes", "ws-a", "data");
  assert.equal(readFileSync(join(onDisk, "a.txt"), "utf8"), "/volumes/data/a.txt\ninside\n");
  assert.equal(statSync(join(onDisk, "b.txt")).uid, 0);
  assert.deepEqual(
    (await h.host.files.listDir(c.id, "/volumes/data")).map((f) => [f.name, f.uid]),
    [
      ["a.txt", 0],
      ["b.txt", 0],
    ],
  );
});
