// Snapshots of real runc containers: a filesystem commit becomes an image a
// new container runs from (writes kept, deletions kept, the base untouched);
// memory checkpoints need `criu check` to pass, and where it fails (this
// project's VM) the calls answer checkpoint_unavailable with criu's reason.

import assert from "node:assert/strict";
import { join } from "node:path";
import { test } from "node:test";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import { needs } from "../helpers/env.ts";
import { HOST_COMMANDS, hostHarness, MiB } from "../host/harness.ts";
import { FakeAgent } from "../rpc/fake-agent.ts";
import { rejectsWith, SLEEP, sh } from "../files/harness.ts";

test("container snapshots", { timeout: 600_000 }, async (t) => {
  if (!needs(t, { root: true, commands: [...HOST_COMMANDS, "tar"] })) return;
  const h = await hostHarness(t);
  const base = { cpu: 0.25, memoryBytes: 256 * MiB, args: SLEEP };
  const run = (image = h.imageRef) => h.host.runContainer({ ...base, image });
  const socket = join(h.dir, "rpc", "agent.sock");
  const server = await startAgentRpcServer({ impl: new FakeAgent(), containers: h.host, unixSocket: socket });
  t.after(() => server.close());
  const client = new AgentRpcClient({ address: `unix://${socket}` });
  t.after(() => client.close());

  await t.test("commitFilesystem: a new container sees the writes, and deletions stay deleted", async () => {
    const c = await run();
    await sh(
      h.host,
      c.id,
      [
        "mkdir -p /work/deep/er",
        "echo hello > /work/new.txt",
        "echo nested > /work/deep/er/n.txt",
        "ln -s /work/new.txt /work/link",
        "rm /etc/debian_version",
        // Removed and made again: an opaque directory in overlayfs' terms.
        "rm -rf /etc/apt && mkdir /etc/apt && echo x > /etc/apt/only",
        "echo changed > /etc/hostname.berth && chmod 4750 /etc/hostname.berth",
      ].join(" && "),
    );
    const img = await h.host.commitFilesystem(c.id, "localhost/committed:one");
    assert.match(img.digest, /^sha256:/);
    assert.ok((await h.host.listImages()).some((i) => i.digest === img.digest));
    await h.host.stopContainer(c.id, { graceMs: 0, remove: true });

    const c2 = await run("localhost/committed:one");
    const script = [
      "cat /work/new.txt /work/deep/er/n.txt",
      "readlink /work/link",
      "test -e /etc/debian_version && echo present || echo gone",
      "ls -A /etc/apt",
      "stat -c %a /etc/hostname.berth",
    ].join("; ");
    assert.equal(await sh(h.host, c2.id, script), "hello\nnested\n/work/new.txt\ngone\nonly\n4750\n");

    // A commit of a commit, over gRPC: layers stack, the file API sees the result.
    await sh(client, c2.id, "rm /work/new.txt && echo two > /work/second.txt");
    await client.commitFilesystem(c2.id, "localhost/committed:two");
    const c3 = await client.runContainer({ ...base, image: "localhost/committed:two" });
    assert.equal(
      await sh(client, c3.id, "ls -A /work; cat /work/second.txt; ls -A /etc/apt"),
      "deep\nlink\nsecond.txt\ntwo\nonly\n",
    );
    assert.equal((await client.statPath(c3.id, "/work/link")).isSymlink, true);

    // The base image is as it was.
    const c4 = await run();
    assert.equal(
      await sh(h.host, c4.id, "test -e /etc/debian_version && echo present; test -e /work || echo none"),
      "present\nnone\n",
    );
    assert.notEqual(await sh(h.host, c4.id, "ls -A /etc/apt"), "only\n");
    for (const id of [c2.id, c3.id, c4.id]) await h.host.stopContainer(id, { graceMs: 0, remove: true });
  });

  await t.test(
    "commitFilesystem of an unknown container is not_found; a bad reference is refused",
    async () => {
      await assert.rejects(h.host.commitFilesystem("ctr-missing", "localhost/x:1"), rejectsWith("not_found"));
      const c = await run();
      await assert.rejects(client.commitFilesystem(c.id, ""), rejectsWith("invalid_request"));
      await assert.rejects(h.host.commitFilesystem(c.id, "Not A Ref!"), (e: unknown) => {
        assert.equal((e as { code?: string }).code, "invalid_request");
        return true;
      });
      await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
    },
  );

  const support = await h.host.checkpointSupport();
  assert.deepEqual(await client.checkpointSupport(), support, "the same answer over gRPC");

  // Whether runc can checkpoint is the kernel's answer (`criu check`), not a
  // package the suite could install: the test checks what this host can do,
  // on every host, and says which it was. Where criu works, a real checkpoint
  // and restore; where it fails (this project's VM), the refusal with criu's reason.
  async function refusedWithCriuReason(): Promise<void> {
    assert.match(support.reason ?? "", /criu/i);
    const c = await run();
    for (const api of [h.host, client]) {
      await assert.rejects(api.checkpointMemory(c.id, "snap-one"), (e: unknown) => {
        const err = e as { code?: string; message?: string; details?: { reason?: string } };
        assert.equal(err.code, "checkpoint_unavailable", err.message);
        assert.ok(err.message?.includes(support.reason ?? "?"), err.message);
        assert.equal(err.details?.reason, support.reason);
        return true;
      });
    }
    await assert.rejects(client.restoreMemory("snap-one", { ...base }), rejectsWith("not_found"));
    await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
  }

  async function checkpointAndRestore(): Promise<void> {
    const counter =
      "import time\nn = 0\nwhile True:\n    n += 1\n    open('/work/n', 'w').write(str(n))\n    time.sleep(0.05)\n";
    const c = await h.host.runContainer({
      ...base,
      image: h.imageRef,
      args: ["sh", "-c", `mkdir -p /work && python3 -c "${counter}"`],
    });
    await sh(h.host, c.id, "sleep 1");
    const snap = await client.checkpointMemory(c.id, "snap-real");
    assert.ok(snap.sizeBytes > 0);
    const atCheckpoint = Number(await sh(h.host, c.id, "cat /work/n"));
    await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
    const r = await client.restoreMemory("snap-real", { ...base, id: "ctr-restored" });
    assert.equal(r.state, "running");
    await sh(h.host, r.id, "sleep 1");
    assert.ok(Number(await sh(h.host, r.id, "cat /work/n")) > atCheckpoint, "the counter carried on");
    await h.host.stopContainer(r.id, { graceMs: 0, remove: true });
  }

  await t.test(
    "memory snapshots: checkpoint and restore where criu check passes, checkpoint_unavailable with criu's reason where it fails",
    async (t) => {
      if (support.supported) {
        t.diagnostic("criu check passes here: a real checkpoint, then a restore that carries on");
        await checkpointAndRestore();
      } else {
        t.diagnostic(`criu check fails here (${support.reason}): checking the refusal`);
        await refusedWithCriuReason();
      }
    },
  );
});
