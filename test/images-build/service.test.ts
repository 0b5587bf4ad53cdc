// ImageBuilds (coordinator/images): a build is reserved through the real
// planner (kind image-build) and released at the end, runs on the agent the
// planner chose, is recorded building → ready (or failed, with the error),
// and concurrent requests for one build share it. The agent is scripted (its
// real builder is test/build/builder.test.ts); the store is real, on SQLite
// and PostgreSQL.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { IMAGE_BUILD_KIND, ImageBuilds } from "../../coordinator/images/index.ts";
import { Planner } from "../../coordinator/scheduler/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { capacity, oneAgentFleet } from "../containers/fakes.ts";
import { openSuiteStore, STORE_ENGINES } from "../helpers/engines.ts";
import { waitUntil } from "../helpers/wait.ts";
import { buildsThrough, collect } from "./builds.ts";

/** An agent whose build emits the events of a real one; `gate` holds it before its first step. */
class ScriptedAgent implements ImageBuildApi {
  calls: BuildImageRequest[] = [];
  gate: Promise<void> = Promise.resolve();
  failAt: number | undefined;

  async *buildImage(req: BuildImageRequest): AsyncGenerator<BuildEvent> {
    this.calls.push(req);
    const imageId = `img-${"a".repeat(24)}`;
    yield { type: "base", imageId, ref: req.baseImage ?? "default", digest: "sha256:base" };
    await this.gate;
    for (const [i, s] of req.steps.entries()) {
      const index = i + 1;
      yield { type: "step", index, total: req.steps.length, name: s.name, cached: false };
      yield { type: "output", index, stream: "stdout", line: `ran ${s.name}` };
      if (this.failAt === index) {
        throw new BerthError("image_build_failed", `build step ${index} exited with code 2`, { exitCode: 2 });
      }
      yield { type: "step_done", index, cached: false, seconds: 0.1, digest: `sha256:${index}` };
    }
    yield {
      type: "done",
      imageId,
      ref: "localhost/berth-build-cache:x",
      digest: "sha256:final",
      cachedSteps: 0,
      builtSteps: req.steps.length,
    };
  }
}

for (const engine of STORE_ENGINES) {
  describe(`image builds through the coordinator (${engine.name})`, async () => {
    const store = await openSuiteStore(engine);
    const ws = (await store.workspaces.create("images")).id;
    const planner = new Planner({ fleet: oneAgentFleet("agent-a", capacity(4, 64)) });
    const agent = new ScriptedAgent();
    const { builds, asked } = buildsThrough(store, planner, agent, {
      pipIndex: { indexUrl: "http://mirror.local/simple/" },
    });

    test("a build is reserved, run on the chosen agent, recorded ready and released", async () => {
      let release!: () => void;
      agent.gate = new Promise((r) => (release = r));
      const running = collect(builds.build(ws, { commands: ["echo one"], python_packages: ["numpy"] }));
      await waitUntil(async () => (await store.builtImages.list(ws)).length > 0, {
        what: "the building record",
      });
      assert.deepEqual(
        planner.list([IMAGE_BUILD_KIND]).map((h) => [h.kind, h.agentId, h.cpuMillicores]),
        [[IMAGE_BUILD_KIND, "agent-a", 1000]],
        "the build holds a reservation while it runs",
      );
      assert.deepEqual(
        (await store.builtImages.list(ws)).map((i) => i.status),
        ["building"],
      );
      release();
      const ev = await running;
      assert.deepEqual(asked, ["agent-a"]);
      assert.deepEqual(
        agent.calls[0]?.steps.map((s) => s.name),
        ["echo one", "ensure pip", "pip install numpy"],
      );
      assert.match(agent.calls[0]?.steps[2]?.run ?? "", /--index-url' 'http:\/\/mirror\.local\/simple\/'/);
      const last = ev.at(-1);
      assert.ok(
        last?.type === "image" &&
          last.image.status === "ready" &&
          last.image.ref === "localhost/berth-build-cache:x",
      );
      const [rec] = await store.builtImages.list(ws);
      assert.equal(rec?.status, "ready");
      assert.deepEqual(rec?.steps, ["echo one", "ensure pip", "pip install numpy"]);
      assert.deepEqual(planner.list([IMAGE_BUILD_KIND]), [], "released at the end");
    });

    test("concurrent requests for one build share it", async () => {
      agent.calls = [];
      let release!: () => void;
      agent.gate = new Promise((r) => (release = r));
      const a = collect(builds.build(ws, { commands: ["echo shared"] }));
      const b = collect(builds.build(ws, { commands: ["echo shared"] }));
      release();
      const [ea, eb] = await Promise.all([a, b]);
      assert.equal(agent.calls.length, 1);
      assert.deepEqual(eb, ea);
    });

    test("a failed step records the image failed with the error, rethrows it and releases", async () => {
      agent.failAt = 1;
      await assert.rejects(collect(builds.build(ws, { commands: ["exit 2"] })), (e: unknown) => {
        assert.equal((e as BerthError).code, "image_build_failed");
        return true;
      });
      agent.failAt = undefined;
      const failed = (await store.builtImages.list(ws)).find((i) => i.steps[0] === "exit 2");
      assert.equal(failed?.status, "failed");
      assert.equal(failed?.ref, "");
      assert.match(failed?.error ?? "", /exited with code 2/);
      assert.deepEqual(planner.list([IMAGE_BUILD_KIND]), []);
    });

    test("with_secrets: resolved from the workspace's secrets for the agent only; never recorded", async () => {
      agent.calls = [];
      const asks: [string, readonly string[]][] = [];
      const withSecrets = new ImageBuilds({
        repo: store.builtImages,
        planner,
        agents: { client: () => agent },
        secrets: {
          resolve: async (w, names) => {
            asks.push([w, names]);
            if (names.includes("MISSING")) throw new BerthError("not_found", "secret MISSING not found");
            return Object.fromEntries(names.map((n) => [n, `value-of-${n}`]));
          },
        },
      });
      await collect(
        withSecrets.build(ws, { commands: ["echo secret-build"], secrets: ["HF_TOKEN", "HF_TOKEN"] }),
      );
      assert.deepEqual(asks, [[ws, ["HF_TOKEN"]]]);
      assert.deepEqual(agent.calls[0]?.secretEnv, { HF_TOKEN: "value-of-HF_TOKEN" });
      const rows = JSON.stringify(await store.builtImages.list(ws));
      assert.ok(!rows.includes("value-of-HF_TOKEN"), "no record holds a secret");
      await assert.rejects(
        collect(withSecrets.build(ws, { commands: ["echo other"], secrets: ["MISSING"] })),
        /secret MISSING not found/,
      );
      assert.deepEqual(planner.list([IMAGE_BUILD_KIND]), [], "released after a refused secret too");
    });

    test("what builds cannot do is refused before anything is reserved", async () => {
      assert.throws(() => builds.build(ws, { commands: ["x"], snapshot_id: "snap-1" }), /snapshot/);
      assert.deepEqual(planner.list([IMAGE_BUILD_KIND]), []);
    });
  });
}
