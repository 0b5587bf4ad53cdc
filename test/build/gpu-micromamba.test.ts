// build_with_gpu and micromamba on the agent's builder. GPU: every step's
// container asks for the build's GPU (the same request, so the same
// injection, as any container), shown on the shared fake agent, which hands
// out its GPUs as a host does. micromamba: on a real host, a build whose
// steps run micromamba on a base without it and with no configured binary
// fails before any step runs, saying so and what to do; a configured path
// that is not an executable is refused when the agent starts.

import assert from "node:assert/strict";
import { chmodSync, copyFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { checkMicromambaBin, ImageBuilder } from "../../agent/build/index.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { sh, SLEEP } from "../files/harness.ts";
import { HOST_COMMANDS, hostHarness, MiB } from "../host/harness.ts";

async function collect(api: ImageBuildApi, req: BuildImageRequest): Promise<BuildEvent[]> {
  const out: BuildEvent[] = [];
  for await (const e of api.buildImage(req)) out.push(e);
  return out;
}

test("build_with_gpu: every step's container asks for the GPU and gets one", async () => {
  const agent = new FakeContainerApi({ gpuUuids: ["GPU-aaaa"] });
  const base = agent.images[0]!;
  const gpusSeen: string[][] = [];
  const runContainer = agent.runContainer.bind(agent);
  agent.runContainer = async (req) => {
    const s = await runContainer(req);
    gpusSeen.push([...s.gpus]);
    // The step's command ends at once, as the runtime would report it.
    setImmediate(() => agent.exit(s.id, 0));
    return s;
  };
  const builder = new ImageBuilder(agent);
  const req: BuildImageRequest = {
    baseImage: base.ref,
    steps: [
      { name: "one", run: "echo one" },
      { name: "two", run: "echo two" },
    ],
    gpu: { count: 1, types: ["H100"] },
  };
  const events = await collect(builder, req);
  assert.equal(events.at(-1)?.type, "done");
  assert.deepEqual(
    agent.runs.map((r) => r.gpu),
    [
      { count: 1, types: ["H100"] },
      { count: 1, types: ["H100"] },
    ],
    "each step's container request carries the build's GPU",
  );
  assert.deepEqual(gpusSeen, [["GPU-aaaa"], ["GPU-aaaa"]], "the agent gave each step the GPU");

  const withoutGpu = await collect(builder, { ...req, gpu: undefined });
  const done = (ev: BuildEvent[]) =>
    ev.find((e) => e.type === "done") as Extract<BuildEvent, { type: "done" }>;
  assert.notEqual(done(withoutGpu).imageId, done(events).imageId, "a GPU build is another image");
  assert.equal(agent.runs.at(-1)?.gpu, undefined);
});

test("a micromamba binary that is not an executable file is refused at agent start", (t) => {
  const dir = tempDir(t, "berth-mm-");
  const notExec = join(dir, "micromamba");
  writeFileSync(notExec, "not a program", { mode: 0o644 });
  assert.throws(() => checkMicromambaBin(notExec), /--micromamba-bin .* is not an executable file/);
  assert.throws(() => checkMicromambaBin("micromamba"), /not an absolute path/);
  assert.throws(() => checkMicromambaBin(join(dir, "missing")), /not an executable file/);
});

test("micromamba in neither the base nor the agent's config fails the build at once", {
  timeout: 300_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: [...HOST_COMMANDS, "tar"] })) return;
  const h = await hostHarness(t);
  const req: BuildImageRequest = {
    baseImage: h.imageRef,
    steps: [
      { name: "before", run: "echo before > /before.txt" },
      { name: "micromamba install numpy", run: "micromamba install --yes numpy", micromamba: true },
    ],
    cpu: 0.5,
    memoryBytes: 256 * MiB,
  };
  const seen: BuildEvent[] = [];
  await assert.rejects(
    (async () => {
      for await (const e of h.host.builds.buildImage(req)) seen.push(e);
    })(),
    (e: unknown) => {
      const err = e as { code?: string; message: string };
      assert.equal(err.code, "failed_precondition");
      assert.match(err.message, /micromamba is not in the base image .*berth\/python:bookworm/);
      assert.match(err.message, /no micromamba binary configured/);
      assert.match(err.message, /--micromamba-bin PATH/);
      return true;
    },
  );
  assert.ok(
    seen.some((e) => e.type === "base"),
    "the base was resolved",
  );
  assert.deepEqual(
    seen.filter((e) => e.type === "step" || e.type === "output" || e.type === "step_done"),
    [],
    "no step ran",
  );
  assert.deepEqual(await h.host.listContainers(), [], "the probe's container is removed");

  // The plumbing of a configured binary, not micromamba itself (there is no
  // conda channel here): the operator's file is on a micromamba step's PATH
  // under that name, and in no layer of the image.
  await t.test("a configured binary is on the step's PATH and in no layer", async () => {
    const dir = tempDir(t, "berth-mm-bin-");
    const bin = join(dir, "micromamba-operator");
    copyFileSync("/bin/echo", bin);
    chmodSync(bin, 0o755);
    const builder = new ImageBuilder(h.host, { micromambaBin: () => checkMicromambaBin(bin) });
    const ev = await collect(builder, {
      ...req,
      steps: [
        {
          name: "micromamba on PATH",
          run: 'micromamba from-the-operator > /answer.txt && test "$(command -v micromamba)" = /mnt/code/micromamba',
          micromamba: true,
        },
      ],
    });
    const done = ev.at(-1);
    assert.ok(done?.type === "done", "the step ran");
    const c = await h.host.runContainer({ image: done.ref, args: SLEEP, cpu: 0.25, memoryBytes: 128 * MiB });
    try {
      assert.equal(await sh(h.host, c.id, "cat /answer.txt"), "from-the-operator\n");
      assert.equal(
        await sh(h.host, c.id, "command -v micromamba || echo absent; ls /mnt/code 2>/dev/null | wc -l"),
        "absent\n0\n",
        "the binary is not in the image",
      );
    } finally {
      await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
    }
  });
});
