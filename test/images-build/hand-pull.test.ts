// `berth image pull IMAGE [--pool NAME]` (docs/images.md, "Pull ahead"): the
// route POST /api/v1/image/{ws}/pull and the CLI against the coordinator's
// real HTTP app (SQLite, NATS, tokens with roles), the real pull ahead's
// per-agent pulls, and scripted agents in two pools. Only the pool's ready
// agents pull; each agent's outcome is streamed (a failure named, not the
// whole pull failed); a developer may, a viewer may not; another workspace's
// image, and another workspace's repository in the cluster registry, are not
// found; an unknown pool is refused naming the fleet's pools.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { ImageSummary } from "../../api/index.ts";
import { PullAhead } from "../../coordinator/containers/index.ts";
import {
  type BuiltImage,
  HandPulls,
  ImageBuilds,
  imagesHttpRoutes,
  workspaceRepository,
} from "../../coordinator/images/index.ts";
import { Planner } from "../../coordinator/scheduler/index.ts";
import { bearer } from "../helpers/auth.ts";
import { runCli } from "../helpers/cluster.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { type HttpHarness, cliEnv, startHttpHarness } from "../http/harness.ts";
import { teardownStack } from "../helpers/suite.ts";
import { capacity, fleetOf } from "../containers/fakes.ts";

const REGISTRY = "127.0.0.1:5999";
const BROKEN = "broken-gpu";

/** Agents a, b (pool gpu; b cannot pull) and c (default pool), each answering pulls of `refs`. */
function fleetAndAgents(refs: () => string[]) {
  const fleet = fleetOf([
    ["gpu-a", capacity(4, 16), { pool: "gpu" }],
    [BROKEN, capacity(4, 16), { pool: "gpu" }],
    ["cpu-c", capacity(4, 16)],
  ]);
  const agents = new Map<string, FakeContainerApi>();
  for (const agentId of ["gpu-a", BROKEN, "cpu-c"]) {
    const api = new FakeContainerApi({ agentId });
    const pullImage = api.pullImage.bind(api);
    api.images = [];
    api.pullImage = async (ref, opts) => {
      if (agentId === BROKEN) {
        // Recorded as asked, then failing as a host error would (not a catalog error).
        await pullImage(ref, opts).catch(() => {});
        throw new Error("disk full on the broken host");
      }
      const image: ImageSummary = {
        ref: ref,
        refs: refs(),
        digest: `sha256:${"cd".repeat(32)}`,
        sizeBytes: 3 * 1024 * 1024,
        pulledAt: new Date().toISOString(),
        inUse: false,
      };
      api.images = [image];
      return pullImage(ref, opts);
    };
    agents.set(agentId, api);
  }
  return { fleet, agents };
}

const pulledBy = (agents: Map<string, FakeContainerApi>) =>
  [...agents.values()].filter((a) => a.calls.some((c) => c[0] === "pullImage")).map((a) => a.agentId);

interface Line {
  event: string;
  agent_id?: string;
  image?: string;
  agents?: { agent_id: string; pool: string }[];
  error?: { code: string; message: string };
  pulled?: number;
  failed?: number;
}

describe("berth image pull", () => {
  let x: HttpHarness;
  let agents: Map<string, FakeContainerApi>;
  let builtRef: string;
  let otherImageId: string;
  let tokens: { developer: string; viewer: string };
  let env: NodeJS.ProcessEnv;
  const { later: hooks } = teardownStack({ after });

  before(async () => {
    x = await startHttpHarness(hooks, {
      more: async (h) => {
        const f = fleetAndAgents(() => [builtRef, "docker.io/library/python:3.11"]);
        agents = f.agents;
        const pullAhead = new PullAhead({
          fleet: f.fleet,
          reservations: () => [],
          stubs: { get: async () => undefined },
          deployments: { of: () => undefined, baselines: () => [] },
          agents: { client: (id) => f.agents.get(id) as FakeContainerApi },
          log: { info() {}, warn() {} },
        });
        const builds = new ImageBuilds({
          repo: h.store.builtImages,
          planner: new Planner({ fleet: f.fleet }),
          agents: {
            client: () => {
              throw new Error("no build runs in this test");
            },
          },
          placementWaitMs: 0,
        });
        const pulls = new HandPulls({
          repo: h.store.builtImages,
          ready: () => f.fleet.ready(),
          pullOn: (agentId, ref) => pullAhead.pullOn(agentId, ref),
          registryHost: REGISTRY,
        });
        return { routes: [imagesHttpRoutes(builds, pulls)] };
      },
    });
    const image = (ws: string, imageId: string): BuiltImage => ({
      workspaceId: ws,
      imageId,
      status: "ready",
      baseImage: "",
      baseDigest: "sha256:base",
      agentId: "gpu-a",
      ref: `${REGISTRY}/${workspaceRepository(ws)}@sha256:${"ab".repeat(32)}`,
      digest: `sha256:${"ab".repeat(32)}`,
      steps: ["echo hi"],
      error: "",
      createdAt: new Date().toISOString(),
      updatedAt: new Date().toISOString(),
    });
    const mine = image(x.a.id, "img-0a1b2c");
    builtRef = mine.ref;
    await x.h.store.builtImages.put(mine);
    otherImageId = "img-9f8e7d";
    await x.h.store.builtImages.put(image(x.b.id, otherImageId));
    const token = async (role: "developer" | "viewer") =>
      (await x.h.store.tokens.create(x.a.id, { name: role, role })).secret;
    tokens = { developer: await token("developer"), viewer: await token("viewer") };
    env = await cliEnv(x, hooks, tokens.developer);
  });

  const pull = (body: Record<string, unknown>, token = tokens.developer, ws = x.a.externalId) =>
    x.app.inject({
      method: "POST",
      url: `/api/v1/image/${ws}/pull`,
      headers: bearer(token),
      payload: body,
    });
  const lines = (body: string): Line[] =>
    body
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Line);
  const reset = () => {
    for (const a of agents.values()) a.calls.length = 0;
  };

  test("a built image onto a pool: only its agents pull, each outcome streamed", async () => {
    reset();
    const r = await pull({ image: "img-0a1b2c", pool: "gpu" });
    assert.equal(r.statusCode, 200, r.body);
    assert.match(String(r.headers["content-type"]), /application\/x-ndjson/);
    const ls = lines(r.body);
    assert.equal(ls[0]?.event, "pulling");
    assert.equal(ls[0]?.image, builtRef);
    assert.ok(ls[0]?.agents?.every((a) => a.pool === "gpu"));
    assert.deepEqual(new Set(ls[0]?.agents?.map((a) => a.agent_id)), new Set(["gpu-a", BROKEN]));
    const byAgent = new Map(ls.slice(1, -1).map((l) => [l.agent_id, l]));
    assert.equal(byAgent.get("gpu-a")?.event, "pulled");
    assert.equal(byAgent.get(BROKEN)?.event, "failed");
    // An unexpected agent error is masked with an id, never its own text.
    assert.doesNotMatch(JSON.stringify(byAgent.get(BROKEN)), /disk full/);
    assert.deepEqual(ls.at(-1), { event: "done", pulled: 1, failed: 1 });
    assert.deepEqual(pulledBy(agents).sort(), [BROKEN, "gpu-a"]);
  });

  test("without a pool every ready agent pulls; a public reference is pulled as it is", async () => {
    reset();
    const r = await pull({ image: "docker.io/library/python:3.11" });
    assert.equal(r.statusCode, 200, r.body);
    assert.deepEqual(lines(r.body).at(-1), { event: "done", pulled: 2, failed: 1 });
    assert.deepEqual(pulledBy(agents).sort(), [BROKEN, "cpu-c", "gpu-a"]);
    assert.ok(
      [...agents.values()].every((a) =>
        a.calls.filter((c) => c[0] === "pullImage").every((c) => c[1] === "docker.io/library/python:3.11"),
      ),
    );
  });

  test("an unknown pool is refused naming the fleet's pools; a bad pool name is invalid", async () => {
    reset();
    const r = await pull({ image: "img-0a1b2c", pool: "tpu" });
    assert.equal(r.statusCode, 422, r.body);
    const err = r.json().error;
    assert.equal(err.code, "unplaceable");
    assert.match(err.message, /no agent is in pool "tpu" \(the fleet has pools: default, gpu\)/);
    const bad = await pull({ image: "img-0a1b2c", pool: "Not A Pool" });
    assert.equal(bad.statusCode, 400, bad.body);
    assert.match(bad.json().error.message, /is not a pool name/);
    assert.deepEqual(pulledBy(agents), [], "nothing was pulled");
  });

  test("another workspace's image and repository are not found; a viewer may not pull", async () => {
    reset();
    const theirs = await pull({ image: otherImageId });
    assert.equal(theirs.statusCode, 404, theirs.body);
    const theirRepo = await pull({ image: `${REGISTRY}/${workspaceRepository(x.b.id)}:latest` });
    assert.equal(theirRepo.statusCode, 404, theirRepo.body);
    const stepCache = await pull({ image: "localhost/berth-build-cache:abc" });
    assert.equal(stepCache.statusCode, 404, stepCache.body);
    const missing = await pull({ image: "img-000000" });
    assert.equal(missing.statusCode, 404, missing.body);
    const otherWs = await pull({ image: "img-0a1b2c" }, x.tokenB);
    assert.equal(otherWs.statusCode, 404, otherWs.body);
    const viewer = await pull({ image: "img-0a1b2c" }, tokens.viewer);
    assert.equal(viewer.statusCode, 403, viewer.body);
    assert.deepEqual(pulledBy(agents), [], "nothing was pulled");
  });

  test("the CLI prints each agent's outcome and exits 1 when one failed", async () => {
    reset();
    const r = await runCli(["image", "pull", "img-0a1b2c", "--pool", "gpu"], env);
    assert.equal(r.code, 1, r.stderr);
    const out = r.stdout.trim().split("\n");
    assert.match(out[0] ?? "", /^pulling 127\.0\.0\.1:5999\/berth\/\S+ onto 2 agents: /);
    assert.ok(
      out.some((l) => /^gpu-a: pulled sha256:cdcdcdcdcdcd \(3\.0 MiB\) in [\d.]+ s$/.test(l)),
      r.stdout + r.stderr,
    );
    assert.ok(
      out.some((l) => new RegExp(`^${BROKEN}: failed after [\\d.]+ s: internal: `).test(l)),
      r.stdout,
    );
    assert.equal(out.at(-1), "1 pulled, 1 failed");

    const ok = await runCli(["image", "pull", "img-0a1b2c", "--pool", "default", "--json"], env);
    assert.equal(ok.code, 0, ok.stderr);
    const json = lines(ok.stdout);
    assert.deepEqual(
      json.map((l) => [l.event, l.agent_id]),
      [
        ["pulling", undefined],
        ["pulled", "cpu-c"],
        ["done", undefined],
      ],
    );

    const refused = await runCli(["image", "pull", "img-0a1b2c", "--pool", "tpu"], env);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /no agent is in pool "tpu" \(the fleet has pools: default, gpu\)/);
  });
});
