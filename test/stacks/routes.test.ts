import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import type { DeploymentService } from "../../coordinator/deployments/service.ts";
import type { ContainerTable } from "../../coordinator/containers/container-table.ts";
import { DeploymentMembers } from "../../coordinator/stacks/deployment-member.ts";
import type { HealthAnswer } from "../../coordinator/stacks/health-probe.ts";
import { stacksHttpRoutes } from "../../coordinator/stacks/index.ts";
import { StackService } from "../../coordinator/stacks/service.ts";
import { bearer } from "../helpers/auth.ts";
import { waitUntil } from "../helpers/wait.ts";
import { deployInput } from "../deployments/helpers.ts";
import { addContainer, type HttpHarness, startHttpHarness } from "../http/harness.ts";

// The stack routes (coordinator/stacks/routes.ts) over the real stack,
// deployment and task services and a real store: a stack of two endpoints is
// created, updated (an unchanged member is kept), and rolled back when its
// second member's new container fails to start; two updates at once are a
// conflict; another workspace's stack is 404; bad input a 400 naming the
// cause. Containers are the container manager's own table, filled here as
// the manager fills it once a container runs; a start failure is what the
// manager reports for a stub (the e2e test in test/e2e/stacks.test.ts runs
// real containers).

describe("stack routes", () => {
  let x: HttpHarness;
  let deployments: DeploymentService;
  let table: ContainerTable;
  const startErrors = new Map<string, string>();
  const health = new Map<string, HealthAnswer>();
  let n = 0;
  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  before(async () => {
    x = await startHttpHarness(
      { after: (fn) => cleanups.push(fn) },
      {
        more: async (h, containers, _later, deps) => ({
          routes: [
            stacksHttpRoutes(
              new StackService({
                repo: h.store.stacks,
                kinds: [
                  new DeploymentMembers({
                    deployments: deps,
                    containers: {
                      containersOf: (stubId) => containers.info((c) => c.stubId === stubId),
                      startError: (stubId) => startErrors.get(stubId),
                    },
                    // What each container's runner answers to GET /.berth/health (health-probe.test.ts asks a real one).
                    probe: async (c) => health.get(c.containerId),
                    settleMs: 0,
                  }),
                ],
                log: pino({ level: "silent" }),
                pollMs: 10,
              }),
            ),
          ],
        }),
      },
    );
    deployments = x.deployments;
    table = x.containers;
  });

  const wsA = () => x.a.externalId;
  const member = (name: string, keepWarm = 60) => {
    const d = deployInput(name, "endpoint", { config: { keep_warm_seconds: keepWarm } });
    return { kind: "deployment", name, type: d.kind, config: d.config, extra: d.extra };
  };
  const call = (method: "GET" | "POST" | "PUT", url: string, payload?: object, token = x.tokenA) =>
    x.app.inject({ method, url, headers: bearer(token), ...(payload ? { payload } : {}) });
  /**
   * The newest version of `name` once deployed, given a running container (what the manager does)
   * whose runner answers the health check as `answer` (null: it does not answer yet).
   */
  const runContainer = async (
    name: string,
    version: number,
    answer: HealthAnswer | null = { healthy: true },
  ) => {
    const dep = await waitUntil(
      async () => (await deployments.list(x.a.id, { name })).find((d) => d.version === version),
      { what: `${name} v${version} deployed` },
    );
    const id = `ctr-${name}-${++n}`;
    health.set(id, answer ?? undefined);
    addContainer(table, { id, stubId: dep.stubId, workspaceId: x.a.id, since: Date.now() });
    return dep;
  };
  const deployed = async (name: string, version: number) =>
    waitUntil(async () => (await deployments.list(x.a.id, { name })).find((d) => d.version === version), {
      what: `${name} v${version} deployed`,
    });

  test("a stack of two endpoints deploys, updates, and rolls back as one", async () => {
    // Create: both members deployed, held at one container while waited for, then ready.
    const created = call("POST", `/api/v1/stack/${wsA()}`, {
      name: "shop",
      members: [member("web"), member("api")],
    });
    const web1 = await deployed("web", 1);
    assert.equal(
      deployments.states.of(web1.stubId)?.minContainers,
      1,
      "held at one container while waited for",
    );
    await runContainer("web", 1);
    await runContainer("api", 1);
    const r1 = await created;
    assert.equal(r1.statusCode, 201, r1.body);
    const s1 = r1.json();
    assert.equal(s1.name, "shop");
    assert.equal(s1.current_version, 1);
    assert.equal(s1.latest.status, "ready");
    assert.deepEqual(
      s1.current.members.map((m: { name: string; action: string; state: string; version: number }) => [
        m.name,
        m.action,
        m.state,
        m.version,
      ]),
      [
        ["web", "deploy", "ready", 1],
        ["api", "deploy", "ready", 1],
      ],
    );
    assert.equal(deployments.states.of(web1.stubId)?.minContainers, 0, "the hold is released once ready");

    // Update: web unchanged (kept), api changed (v2).
    const updated = call("PUT", `/api/v1/stack/${wsA()}/${s1.id}`, {
      members: [member("web"), member("api", 120)],
    });
    await runContainer("api", 2);
    const r2 = await updated;
    assert.equal(r2.statusCode, 200, r2.body);
    const s2 = r2.json();
    assert.equal(s2.current_version, 2);
    const byName2 = Object.fromEntries(s2.current.members.map((m: { name: string }) => [m.name, m]));
    assert.equal(byName2.web.action, "keep");
    assert.equal(byName2.web.version, 1);
    assert.equal(byName2.api.action, "deploy");
    assert.equal(byName2.api.version, 2);
    assert.deepEqual(byName2.api.previous, { id: s1.current.members[1].id, version: 1 });

    // Both changed; api's new handler does not load: every member goes back to version 2's.
    const failing = call("PUT", `/api/v1/stack/${wsA()}/${s1.id}`, {
      members: [member("web", 30), member("api", 30)],
    });
    await runContainer("web", 2);
    await runContainer("api", 3, { healthy: false, error: "import of app:api failed: RuntimeError: boom" });
    const r3 = await failing;
    assert.equal(r3.statusCode, 200, r3.body);
    const s3 = r3.json();
    assert.equal(s3.current_version, 2, "the live version stays the previous one");
    assert.equal(s3.latest.version, 3);
    assert.equal(s3.latest.status, "rolled_back");
    assert.equal(s3.latest.failure.member, "api");
    assert.match(
      s3.latest.failure.reason,
      /its handler does not load: import of app:api failed: RuntimeError: boom/,
    );
    const byName3 = Object.fromEntries(s3.latest.members.map((m: { name: string }) => [m.name, m]));
    assert.equal(byName3.web.state, "rolled_back");
    assert.equal(byName3.api.state, "failed");
    // The new versions are stopped; the previous ones answer /endpoint/{name}.
    const web = await deployments.list(x.a.id, { name: "web" });
    const api = await deployments.list(x.a.id, { name: "api" });
    assert.deepEqual(web.map((d) => [d.version, d.active]).sort(), [
      [1, true],
      [2, false],
    ]);
    assert.deepEqual(api.map((d) => [d.version, d.active]).sort(), [
      [1, true],
      [2, true],
      [3, false],
    ]);
    assert.equal((await deployments.resolveByName(x.a.id, "web")).deployment.version, 1);
    assert.equal((await deployments.resolveByName(x.a.id, "api")).deployment.version, 2);

    // The list shows the stack with its live and latest versions.
    const list = (await call("GET", `/api/v1/stack/${wsA()}`)).json();
    const shop = list.stacks.find((s: { name: string }) => s.name === "shop");
    assert.equal(shop.current.version, 2);
    assert.equal(shop.latest.status, "rolled_back");
  });

  test("a member whose container does not start fails at once; one not answering yet is waited for", async () => {
    const created = call("POST", `/api/v1/stack/${wsA()}`, {
      name: "nostart",
      members: [member("nostart-web")],
    });
    // Running, but its server does not answer yet: pending, not failed, until the start error comes.
    const dep = await runContainer("nostart-web", 1, null);
    startErrors.set(dep.stubId, "runner container ctr-x ended (exited, code 1) 0 s after it started");
    const s = (await created).json();
    assert.equal(s.latest.status, "rolled_back");
    assert.deepEqual(s.latest.failure, {
      member: "nostart-web",
      reason:
        "its container does not start: runner container ctr-x ended (exited, code 1) 0 s after it started",
    });
  });

  test("a member that never becomes ready fails at ready_timeout_s and is rolled back", async () => {
    const r = await call("POST", `/api/v1/stack/${wsA()}`, {
      name: "slow",
      members: [member("slow-web")],
      ready_timeout_s: 1,
    });
    assert.equal(r.statusCode, 201, r.body);
    const s = r.json();
    assert.equal(s.current_version, 0);
    assert.equal(s.current, null);
    assert.equal(s.latest.status, "rolled_back");
    assert.deepEqual(s.latest.failure, {
      member: "slow-web",
      reason: "not ready within ready_timeout_s (1 s)",
    });
    const [d] = await deployments.list(x.a.id, { name: "slow-web" });
    assert.equal(d?.active, false, "a new member with nothing before it is stopped");
  });

  test("?wait=false answers 202 with the attempt applying; GET follows it to ready", async () => {
    const r = await call("POST", `/api/v1/stack/${wsA()}?wait=false`, {
      name: "later",
      members: [member("later-web")],
    });
    assert.equal(r.statusCode, 202, r.body);
    const started = r.json();
    assert.equal(started.latest.status, "applying");
    assert.equal(started.applying_version, 1);
    assert.equal(started.current, null);
    await runContainer("later-web", 1);
    const done = await waitUntil(
      async () => {
        const list = (await call("GET", `/api/v1/stack/${wsA()}`)).json();
        const s = list.stacks.find((x: { id: string }) => x.id === started.id);
        return s.latest.status !== "applying" && s;
      },
      { what: "the attempt ended" },
    );
    assert.equal(done.latest.status, "ready");
    assert.equal(done.current_version, 1);
    assert.equal(done.applying_version, null);
  });

  test("two updates of one stack at once: the second is a 409 naming the attempt in flight", async () => {
    const created = call("POST", `/api/v1/stack/${wsA()}`, { name: "duo", members: [member("duo-a")] });
    await runContainer("duo-a", 1);
    const s = (await created).json();
    const first = call("PUT", `/api/v1/stack/${wsA()}/${s.id}`, { members: [member("duo-a", 5)] });
    await deployed("duo-a", 2);
    const second = await call("PUT", `/api/v1/stack/${wsA()}/${s.id}`, { members: [member("duo-a", 6)] });
    assert.equal(second.statusCode, 409, second.body);
    assert.equal(second.json().error.code, "conflict");
    assert.match(second.json().error.message, /stack duo is being applied \(version 2\)/);
    await runContainer("duo-a", 2);
    const done = (await first).json();
    assert.equal(done.current_version, 2);
  });

  test("another workspace's stack is 404; its list is empty of ours", async () => {
    const created = call("POST", `/api/v1/stack/${wsA()}`, { name: "mine", members: [member("mine-web")] });
    await runContainer("mine-web", 1);
    const s = (await created).json();
    const put = await call(
      "PUT",
      `/api/v1/stack/${x.b.externalId}/${s.id}`,
      { members: [member("mine-web", 9)] },
      x.tokenB,
    );
    assert.equal(put.statusCode, 404, put.body);
    assert.equal(put.json().error.code, "not_found");
    // A's ws id with B's token, and B's own list.
    assert.equal((await call("GET", `/api/v1/stack/${wsA()}`, undefined, x.tokenB)).statusCode, 404);
    assert.equal(
      (await call("PUT", `/api/v1/stack/${wsA()}/${s.id}`, { members: [member("mine-web", 9)] }, x.tokenB))
        .statusCode,
      404,
    );
    // Checked before the body: a bad body on another workspace's stack is 404 too, not 400.
    const badBody = await call("PUT", `/api/v1/stack/${x.b.externalId}/${s.id}`, { members: [] }, x.tokenB);
    assert.equal(badBody.statusCode, 404, badBody.body);
    const badWs = await call("POST", `/api/v1/stack/${wsA()}`, { name: "" }, x.tokenB);
    assert.equal(badWs.statusCode, 404, badWs.body);
    const theirs = (await call("GET", `/api/v1/stack/${x.b.externalId}`, undefined, x.tokenB)).json();
    assert.deepEqual(theirs.stacks, []);
    // Nothing was deployed by B's attempts.
    assert.deepEqual(
      (await deployments.list(x.a.id, { name: "mine-web" })).map((d) => d.version),
      [1],
    );
  });

  test("bad input is a 400 naming the cause; nothing is deployed", async () => {
    const bad: [object, RegExp][] = [
      [{ name: "bad name!", members: [member("b1")] }, /stack name "bad name!" is not valid/],
      [{ name: "b", members: [] }, /members/],
      [
        { name: "b", members: [{ kind: "queue", name: "q" }] },
        /members\[0\]\.kind "queue" is not a member kind: use one of deployment/,
      ],
      [
        { name: "b", members: [member("b1"), member("b1")] },
        /members\[1\]: the stack names the deployment b1 twice/,
      ],
      [
        { name: "b", members: [{ kind: "deployment", name: "b1" }] },
        /members\[0\] \(deployment b1\): type .* is missing/,
      ],
      [{ name: "b", members: [{ ...member("b1"), type: "cron" }] }, /unknown deployment type "cron"/],
      [{ name: "b", members: [member("b1")], ready_timeout_s: 0 }, /ready_timeout_s/],
    ];
    for (const [body, message] of bad) {
      const r = await call("POST", `/api/v1/stack/${wsA()}`, body);
      assert.equal(r.statusCode, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.body}`);
      assert.match(r.json().error.message, message);
    }
    assert.deepEqual(await deployments.list(x.a.id, { name: "b1" }), []);
    assert.ok(
      !(await call("GET", `/api/v1/stack/${wsA()}`))
        .json()
        .stacks.some((s: { name: string }) => s.name === "b"),
    );
    // A name taken is a 409 that says to PUT; a member of another stack is a 409 naming it.
    const again = await call("POST", `/api/v1/stack/${wsA()}`, { name: "shop", members: [member("zzz")] });
    assert.equal(again.statusCode, 409, again.body);
    assert.match(again.json().error.message, /stack named shop already: update it with PUT/);
    const stolen = await call("POST", `/api/v1/stack/${wsA()}`, { name: "thief", members: [member("web")] });
    assert.equal(stolen.statusCode, 409, stolen.body);
    assert.match(stolen.json().error.message, /the deployment web is a member of stack shop/);
  });
});
