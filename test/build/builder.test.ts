// Image builds on a real container host (runc): each step a container whose
// writes become one cached layer; a rebuild runs nothing, a changed last step
// reruns only that step, a failing step names itself, its exit code and its
// output and leaves no container behind. Then the same over the agent's gRPC API.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { join } from "node:path";
import { test } from "node:test";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { needs } from "../helpers/env.ts";
import { agentRpcClient } from "../helpers/real-agent.ts";
import { HOST_COMMANDS, hostHarness, MiB } from "../host/harness.ts";
import { sh, SLEEP } from "../files/harness.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";

async function collect(api: ImageBuildApi, req: BuildImageRequest): Promise<BuildEvent[]> {
  const out: BuildEvent[] = [];
  for await (const e of api.buildImage(req)) out.push(e);
  return out;
}

const marks = (events: BuildEvent[]) =>
  events.flatMap((e) => (e.type === "step_done" ? [`${e.index}:${e.cached ? "cached" : "built"}`] : []));

test("image builds on an agent", { timeout: 600_000 }, async (t) => {
  if (!needs(t, { root: true, commands: [...HOST_COMMANDS, "tar"] })) return;
  const h = await hostHarness(t);
  const steps = [
    { name: "write a file", run: "mkdir -p /opt/app && echo one > /opt/app/one.txt" },
    { name: "use the env", run: 'echo "$GREETING" > /opt/app/greeting.txt && echo said "$GREETING"' },
    { name: "last", run: "echo three > /opt/app/three.txt" },
  ];
  const req: BuildImageRequest = {
    baseImage: h.imageRef,
    steps,
    env: { GREETING: "hello" },
    cpu: 0.5,
    memoryBytes: 256 * MiB,
  };

  const first = await collect(h.host.builds, req);
  assert.deepEqual(marks(first), ["1:built", "2:built", "3:built"]);
  assert.ok(
    first.some((e) => e.type === "output" && e.index === 2 && e.line === "said hello"),
    "step output is streamed",
  );
  const done = first.at(-1);
  assert.equal(done?.type, "done");
  if (done?.type !== "done") return;
  assert.match(done.imageId, /^img-[0-9a-f]{24}$/);
  const c = await h.host.runContainer({ image: done.ref, args: SLEEP, cpu: 0.25, memoryBytes: 128 * MiB });
  assert.equal(
    await sh(h.host, c.id, "cat /opt/app/one.txt /opt/app/greeting.txt /opt/app/three.txt"),
    "one\nhello\nthree\n",
  );
  await h.host.stopContainer(c.id, { graceMs: 0, remove: true });

  await t.test("the same build again runs no step", async () => {
    const again = await collect(h.host.builds, req);
    assert.deepEqual(marks(again), ["1:cached", "2:cached", "3:cached"]);
    assert.ok(!again.some((e) => e.type === "output"), "a cached step runs nothing");
    const d = again.at(-1);
    assert.ok(d?.type === "done" && d.imageId === done.imageId && d.digest === done.digest);
  });

  await t.test("changing only the last step reruns only that step", async () => {
    const changed = {
      ...req,
      steps: [...steps.slice(0, 2), { name: "last", run: "echo THREE > /opt/app/three.txt" }],
    };
    const ev = await collect(h.host.builds, changed);
    assert.deepEqual(marks(ev), ["1:cached", "2:cached", "3:built"]);
    const d = ev.at(-1);
    assert.ok(d?.type === "done" && d.imageId !== done.imageId);
  });

  await t.test("changing the environment reruns every step that saw it", async () => {
    const ev = await collect(h.host.builds, { ...req, env: { GREETING: "bye" } });
    assert.deepEqual(marks(ev), ["1:built", "2:built", "3:built"]);
  });

  await t.test("concurrent requests for one image run one build", async () => {
    const r = { ...req, steps: [...steps, { name: "slowish", run: "echo ran-once; sleep 1" }] };
    const [a, b] = await Promise.all([collect(h.host.builds, r), collect(h.host.builds, r)]);
    assert.deepEqual(marks(a), ["1:cached", "2:cached", "3:cached", "4:built"]);
    assert.deepEqual(marks(b), marks(a), "the second request follows the first build");
    const ranOnce = (ev: BuildEvent[]) =>
      ev.filter((e) => e.type === "output" && e.line === "ran-once").length;
    assert.equal(ranOnce(a), 1);
    assert.equal(ranOnce(b), 1);
  });

  await t.test(
    "a failing step names the step, its exit code and its output; no container is left",
    async () => {
      const before = (await h.host.listImages()).length;
      const bad = {
        ...req,
        steps: [steps[0]!, { name: "break", run: "echo about to fail; echo oops >&2; exit 7" }],
      };
      await assert.rejects(collect(h.host.builds, bad), (e: unknown) => {
        const err = e as { code?: string; message: string; details?: Record<string, unknown> };
        assert.equal(err.code, "image_build_failed");
        assert.match(err.message, /step 2\/2 \(break\) exited with code 7/);
        assert.match(err.message, /about to fail/);
        assert.equal(err.details?.exitCode, 7);
        assert.equal(err.details?.step, 2);
        const output = (err.details?.output ?? []) as string[];
        assert.ok(
          output.includes("about to fail") && output.includes("oops"),
          "stdout and stderr lines are in the tail",
        );
        return true;
      });
      assert.deepEqual(await h.host.listContainers(), [], "the failed step's container is removed");
      assert.equal((await h.host.listImages()).length, before, "no layer is committed for the failed step");
    },
  );

  await t.test(
    "a base from a registry that wants a password: works with its credentials, refused clearly without",
    async () => {
      const auth = { user: "builder", password: "base-image-s3cret" };
      const registry = await startTestRegistry(t, { auth });
      const privateRef = await pushTestImage(registry, "private/python", "v1");
      const steps1 = [{ name: "mark", run: "echo private > /from-private" }];
      await assert.rejects(collect(h.host.builds, { baseImage: privateRef, steps: steps1 }), (e: unknown) => {
        const err = e as { code?: string; message: string };
        assert.equal(err.code, "registry_auth_failed");
        assert.match(err.message, /private\/python/);
        return true;
      });
      const client = await agentRpcClient(t, h.host);
      await assert.rejects(
        collect(client, {
          baseImage: privateRef,
          steps: steps1,
          baseCredentials: { username: auth.user, password: "wrong" },
        }),
        (e: unknown) => {
          const err = e as { code?: string; message: string };
          assert.equal(err.code, "registry_auth_failed");
          assert.doesNotMatch(err.message, /wrong|base-image-s3cret/, "no credential in the message");
          return true;
        },
      );
      const ev = await collect(client, {
        baseImage: privateRef,
        steps: steps1,
        baseCredentials: { username: auth.user, password: auth.password },
      });
      const d = ev.at(-1);
      assert.ok(d?.type === "done");
      if (d?.type !== "done") return;
      const c = await h.host.runContainer({ image: d.ref, args: SLEEP, cpu: 0.25, memoryBytes: 128 * MiB });
      assert.equal(await sh(h.host, c.id, "cat /from-private"), "private\n");
      await h.host.stopContainer(c.id, { graceMs: 0, remove: true });

      // base_image_creds' variable form, as the SDK sends it; with no steps the
      // image is the base by digest, which runs without asking the registry again.
      const vars = { REGISTRY_USERNAME: auth.user, REGISTRY_PASSWORD: auth.password };
      const fresh = await pushTestImage(registry, "private/python", "v2");
      const noSteps = await collect(client, { baseImage: fresh, steps: [], baseImageCreds: vars });
      const n = noSteps.at(-1);
      assert.ok(n?.type === "done" && n.ref.includes("@sha256:"), JSON.stringify(n));
      if (n?.type !== "done") return;
      const c2 = await h.host.runContainer({ image: n.ref, args: SLEEP, cpu: 0.25, memoryBytes: 128 * MiB });
      assert.equal(await sh(h.host, c2.id, "echo ran"), "ran\n");
      await h.host.stopContainer(c2.id, { graceMs: 0, remove: true });
      await assert.rejects(
        collect(client, { baseImage: fresh, steps: [], baseImageCreds: { REGISTRY_USERNAME: auth.user } }),
        (e: unknown) => {
          assert.match((e as Error).message, /REGISTRY_PASSWORD/, "the missing variable is named");
          return true;
        },
      );
    },
  );

  await t.test(
    "secrets: readable by the steps; in no layer, config, history, event, error or log line",
    async () => {
      const secret = `s3cret-${randomBytes(12).toString("hex")}`;
      const hash = createHash("sha256").update(secret).digest("hex");
      const secretEnv = { API_TOKEN: secret };
      const marker = `marker-${randomBytes(8).toString("hex")}`;
      const useIt = {
        name: "use the secret",
        // Compared by hash, so the command itself does not hold the value.
        run: `test "$(printf %s "$API_TOKEN" | sha256sum | cut -c1-64)" = ${hash} && echo token-matches && echo "leak: $API_TOKEN" && echo ${marker} > /after-secret`,
      };
      const client = await agentRpcClient(t, h.host);
      const ev = await collect(client, { baseImage: h.imageRef, steps: [useIt], secretEnv });
      const lines = ev.flatMap((e) => (e.type === "output" ? [e.line] : []));
      assert.ok(lines.includes("token-matches"), "the step saw the secret");
      assert.ok(lines.includes("leak: ***"), "the step's output shows it as ***");
      assert.ok(!JSON.stringify(ev).includes(secret), "no event holds it");
      assert.ok(!h.logs.some((l) => l.line.includes(secret)), "no log line of the host holds it");
      assert.ok(h.logs.some((l) => l.line === "leak: ***"));
      await assert.rejects(
        collect(client, {
          baseImage: h.imageRef,
          steps: [{ name: "fail", run: 'echo "about $API_TOKEN"; exit 4' }],
          secretEnv,
        }),
        (e: unknown) => {
          const err = e as { code?: string; message: string; details?: Record<string, unknown> };
          assert.equal(err.code, "image_build_failed");
          assert.ok(!err.message.includes(secret) && !JSON.stringify(err.details).includes(secret));
          assert.match(err.message, /about \*\*\*/);
          return true;
        },
      );
      // Every blob of the store: layer tarballs, image configs (env, history) and manifests.
      const blobs = join(h.dir, "images", "oci", "blobs");
      const grep = spawnSync("grep", ["-rlF", "--", secret, blobs], { encoding: "utf8" });
      assert.equal(
        grep.status,
        1,
        `grep exits 1 when nothing matches; found in: ${grep.stdout}${grep.stderr}`,
      );
      // The same grep does find what the layers hold (so the scan can fail).
      const sanity = spawnSync("grep", ["-rlF", "--", "token-matches", blobs], { encoding: "utf8" });
      assert.equal(sanity.status, 1, "output lines are not in layers either");
      assert.equal(
        spawnSync("grep", ["-rlqF", "--", marker, blobs]).status,
        0,
        "the step's file is in a layer blob",
      );
      assert.ok(execFileSync("ls", [blobs]).length > 0);
    },
  );

  await t.test("over the agent's gRPC API", async () => {
    const client = await agentRpcClient(t, h.host);
    const ev = await collect(client, req);
    assert.deepEqual(marks(ev), ["1:cached", "2:cached", "3:cached"]);
    const d = ev.at(-1);
    assert.ok(d?.type === "done" && d.imageId === done.imageId && d.ref === done.ref);
    const changed = { ...req, steps: [...steps, { name: "more", run: "echo out; echo err >&2" }] };
    const ev2 = await collect(client, changed);
    assert.deepEqual(marks(ev2), ["1:cached", "2:cached", "3:cached", "4:built"]);
    assert.ok(ev2.some((e) => e.type === "output" && e.stream === "stderr" && e.line === "err"));
    await assert.rejects(collect(client, { ...req, steps: [{ name: "x", run: "exit 3" }] }), (e: unknown) => {
      const err = e as { code?: string; details?: Record<string, unknown> };
      assert.equal(err.code, "image_build_failed");
      assert.equal(err.details?.exitCode, 3);
      return true;
    });
    await assert.rejects(
      collect(client, { ...req, steps: [{ name: "x", run: " " }] }),
      /step 1 has no command/,
    );
  });
});
