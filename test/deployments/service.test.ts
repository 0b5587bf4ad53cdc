// DeploymentService over a real SQLite store, a real nats-server and the real
// task service: validation, versions (also under concurrency), serve sessions,
// resolving for the invocation routers, the states the autoscaler reads, the
// schedule source and tick submission, scaling events and the serve sweeper.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  createDeploymentTicker,
  DeploymentScheduleSource,
  submitScheduleTick,
} from "../../coordinator/deployments/index.ts";
import type { DeploymentService } from "../../coordinator/deployments/service.ts";
import { TASKS_STREAM, TaskHeaders } from "../../shared/tasks.ts";
import pino from "pino";
import { startTaskHarness, type TaskHarness } from "../tasks/harness.ts";
import { deployInput, deploymentService } from "./helpers.ts";
import { stubConfig, stubExtra } from "../tasks/harness.ts";

describe("deployment service", () => {
  let h: TaskHarness;
  let svc: DeploymentService;
  let now: { ms: number };
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    h = await startTaskHarness({ after: (fn) => cleanups.push(fn) });
    ({ service: svc, now } = deploymentService(h));
    await svc.open();
    cleanups.unshift(() => svc.close());
  });
  after(async () => {
    for (const fn of cleanups) await fn();
  });

  test("refuses an unknown kind, a bad or reserved name, a bad cron (naming the reason), missing handler params or code", async () => {
    const ws = h.ws.id;
    await assert.rejects(svc.deploy(ws, deployInput("a", "sandbox")), {
      code: "invalid_request",
      message: /unknown deployment type "sandbox"/,
    });
    await assert.rejects(svc.deploy(ws, deployInput("a", "pod")), {
      code: "invalid_request",
      message: /a pod deployment needs extra.entrypoint/,
    });
    for (const name of ["", "has/slash", "-dash", "x".repeat(64), "spa ce"])
      await assert.rejects(svc.deploy(ws, deployInput(name, "endpoint")), {
        code: "invalid_request",
        message: /deployment name/,
      });
    await assert.rejects(svc.deploy(ws, deployInput("id", "endpoint")), { message: /reserved/ });
    await assert.rejects(svc.deploy(ws, deployInput("cron", "schedule", { extra: { when: "61 * * * *" } })), {
      code: "invalid_request",
      message: 'cron expression "61 * * * *": minute field "61": 61 is out of range 0-59',
    });
    await assert.rejects(svc.deploy(ws, deployInput("cron", "schedule", { extra: { when: "" } })), {
      message: /needs extra.when/,
    });
    const noParams = deployInput("np", "taskqueue");
    delete noParams.extra.handler_params;
    await assert.rejects(svc.deploy(ws, noParams), { message: /needs extra.handler_params/ });
    await assert.rejects(
      svc.deploy(ws, deployInput("code", "endpoint", { extra: { code_sha256: "a".repeat(64) } })),
      {
        code: "invalid_request",
        message: /code object a{64} not found/,
      },
    );
    // Nothing was left behind: the failed deploy's version is free again.
    assert.deepEqual(await svc.list(ws, { name: "code" }), []);
    assert.equal((await svc.deploy(ws, deployInput("code", "endpoint"))).version, 1);
  });

  test("a bot: its definition and its transitions' function stubs are checked; its URL is /bot/{name}/v{N}", async () => {
    const ws = h.ws.id;
    const fn = (
      await h.tasks.upsertStub(ws, {
        name: "helper.answer",
        type: "function",
        config: stubConfig(),
        extra: stubExtra(),
      })
    ).stub;
    const def = (
      stubId: string,
      locations = [
        { marker: "Question", expose: true },
        { marker: "Answer", expose: true },
      ],
    ) => ({
      model: "tiny",
      description: null,
      locations,
      transitions: [
        { name: "answer", inputs: { Question: 1 }, outputs: ["Answer"], description: null, stub_id: stubId },
      ],
    });
    const d = await svc.deploy(ws, deployInput("helper", "bot", { extra: { bot: def(fn.id) } }));
    assert.equal(d.kind, "bot");
    assert.equal(svc.urlOf(d), "http://coordinator.test:7070/bot/helper/v1");
    await assert.rejects(svc.deploy(ws, deployInput("nobot", "bot")), {
      code: "invalid_request",
      message: /needs extra.bot/,
    });
    await assert.rejects(
      svc.deploy(
        ws,
        deployInput("b", "bot", { extra: { bot: def(fn.id, [{ marker: "Question", expose: true }]) } }),
      ),
      {
        code: "invalid_request",
        message: "transition answer names the marker type Answer, which has no location in the bot",
      },
    );
    await assert.rejects(svc.deploy(ws, deployInput("b", "bot", { extra: { bot: def("stub-elsewhere") } })), {
      code: "invalid_request",
      message: "transition answer: stub-elsewhere is not a function stub of this workspace",
    });
  });

  test("each deploy is a new version with its own stub {name}/v{N} of type {kind}/deployment", async () => {
    const v1 = await svc.deploy(h.ws.id, deployInput("hello", "endpoint"));
    const v2 = await svc.deploy(
      h.ws.id,
      deployInput("hello", "endpoint", { config: { handler: "app:other" } }),
    );
    assert.deepEqual([v1.version, v2.version], [1, 2]);
    assert.notEqual(v1.stubId, v2.stubId);
    const s1 = await h.tasks.getStub(h.ws.id, v1.stubId);
    const s2 = await h.tasks.getStub(h.ws.id, v2.stubId);
    assert.deepEqual(
      [s1.name, s1.type, s1.config.handler],
      ["hello/v1", "endpoint/deployment", "app:square"],
    );
    assert.deepEqual([s2.name, s2.config.handler], ["hello/v2", "app:other"]);
    assert.equal(svc.urlOf(v2), "http://coordinator.test:7070/endpoint/hello/v2");
    assert.deepEqual(
      (await svc.list(h.ws.id, { name: "hello" })).map((d) => d.version),
      [2, 1],
    );
    await assert.rejects(svc.get(h.otherWs.id, v1.id), { code: "not_found" });
    await assert.rejects(svc.url(h.otherWs.id, v1.id), { code: "not_found" });
    assert.equal(await svc.url(undefined, v1.id), "http://coordinator.test:7070/endpoint/hello/v1");
  });

  test("concurrent deploys of one name get distinct versions, each with its own config", async () => {
    const handlers = Array.from({ length: 6 }, (_, i) => `app:h${i}`);
    const deps = await Promise.all(
      handlers.map((handler) =>
        svc.deploy(h.ws.id, deployInput("busy", "taskqueue", { config: { handler } })),
      ),
    );
    assert.deepEqual(
      deps.map((d) => d.version).sort((a, b) => a - b),
      [1, 2, 3, 4, 5, 6],
    );
    for (const [i, d] of deps.entries()) {
      const stub = await h.tasks.getStub(h.ws.id, d.stubId);
      assert.equal(stub.config.handler, handlers[i], `version ${d.version} has the config of its own deploy`);
      assert.equal(stub.name, `busy/v${d.version}`);
    }
  });

  test("resolve: latest active by name, a named version, stopped versions answer deployment_stopped, by id", async () => {
    const ws = h.ws.id;
    const v1 = await svc.deploy(ws, deployInput("res", "endpoint"));
    const v2 = await svc.deploy(ws, deployInput("res", "endpoint"));
    assert.equal((await svc.resolveByName(ws, "res")).deployment.id, v2.id);
    const named = await svc.resolveByName(ws, "res", 1);
    assert.equal(named.deployment.id, v1.id);
    assert.equal(named.stub.id, v1.stubId);
    assert.equal(named.stub.name, "res/v1");
    await svc.stop(ws, v2.id);
    assert.equal((await svc.resolveByName(ws, "res")).deployment.id, v1.id, "the latest ACTIVE version");
    await assert.rejects(svc.resolveByName(ws, "res", 2), { code: "deployment_stopped", kind: "Conflict" });
    await assert.rejects(svc.resolveById(v2.id), { code: "deployment_stopped" });
    await svc.stop(ws, v1.id);
    await assert.rejects(svc.resolveByName(ws, "res"), {
      code: "deployment_stopped",
      message: /every version/,
    });
    await assert.rejects(svc.resolveByName(ws, "res", 3), { code: "not_found" });
    await assert.rejects(svc.resolveByName(ws, "nope"), { code: "not_found" });
    await assert.rejects(svc.resolveByName(h.otherWs.id, "res"), { code: "not_found" });
    await svc.start(ws, v2.id);
    const byId = await svc.resolveById(v2.id);
    assert.equal(byId.deployment.workspaceId, ws);
    await assert.rejects(svc.resolveById("dep-nope"), { code: "not_found" });
  });

  test("deployments survive a restart: a new service over the same store lists, resolves and knows states", async () => {
    const d = await svc.deploy(h.ws.id, deployInput("durable", "endpoint"));
    await svc.stop(h.ws.id, (await svc.deploy(h.ws.id, deployInput("paused", "endpoint"))).id);
    const { service: restarted } = deploymentService(h);
    await restarted.open();
    try {
      assert.deepEqual(
        (await restarted.list(h.ws.id, { name: "durable" })).map((x) => x.id),
        [d.id],
      );
      const r = await restarted.resolveByName(h.ws.id, "durable");
      assert.equal(r.deployment.id, d.id);
      assert.equal(r.stub.id, d.stubId);
      assert.deepEqual(restarted.states.of(d.stubId)?.active, true);
      await assert.rejects(restarted.resolveByName(h.ws.id, "paused"), /stopped/);
    } finally {
      await restarted.close();
    }
  });

  test("a deploy made by another coordinator is resolved at once (a miss reloads from the store)", async () => {
    const { service: other } = deploymentService(h);
    await other.open();
    try {
      const d = await other.deploy(h.ws.id, deployInput("elsewhere", "taskqueue"));
      now.ms += 2000; // past the once-a-second reload limit
      assert.equal((await svc.resolveByName(h.ws.id, "elsewhere")).deployment.id, d.id);
    } finally {
      await other.close();
    }
  });

  test("a deploy made by another coordinator within the second after a reload is resolved too (by name and by id)", async () => {
    const { service: other } = deploymentService(h);
    await other.open();
    try {
      now.ms += 2000;
      await assert.rejects(svc.resolveByName(h.ws.id, "just-now"), /not found/); // reloads now
      const d = await other.deploy(h.ws.id, deployInput("just-now", "taskqueue"));
      // Same second: the once-a-second reload does not run again; the store is asked about this name.
      assert.equal((await svc.resolveByName(h.ws.id, "just-now")).deployment.id, d.id);
      const d2 = await other.deploy(h.ws.id, deployInput("just-now", "taskqueue"));
      assert.equal((await svc.resolveByName(h.ws.id, "just-now", 2)).deployment.id, d2.id);
      assert.equal((await svc.resolveById(d2.id)).deployment.id, d2.id);
      await assert.rejects(svc.resolveByName(h.ws.id, "never-deployed"), /not found/);
    } finally {
      await other.close();
    }
  });

  test("states: only the latest active version keeps min_containers; stopped → inactive; functions undefined", async () => {
    const ws = h.ws.id;
    const v1 = await svc.deploy(ws, deployInput("scaled", "endpoint", { extra: { min_containers: 2 } }));
    const v2 = await svc.deploy(ws, deployInput("scaled", "endpoint", { extra: { min_containers: 3 } }));
    const states = svc.states;
    assert.deepEqual(states.of(v1.stubId), { active: true, minContainers: 0 });
    assert.deepEqual(states.of(v2.stubId), { active: true, minContainers: 3 });
    const mine = () => states.baselines().filter((b) => b.stubId === v1.stubId || b.stubId === v2.stubId);
    assert.deepEqual(mine(), [{ stubId: v2.stubId, minContainers: 3 }]);
    await svc.stop(ws, v2.id);
    assert.deepEqual(states.of(v2.stubId), { active: false, minContainers: 0 });
    assert.deepEqual(states.of(v1.stubId), { active: true, minContainers: 2 });
    assert.deepEqual(mine(), [{ stubId: v1.stubId, minContainers: 2 }]);
    const plain = deployInput("plain", "function");
    const fn = await h.tasks.upsertStub(ws, {
      name: "plain",
      type: "function",
      config: plain.config,
      extra: plain.extra,
    });
    assert.equal(states.of(fn.stub.id), undefined);

    // Another coordinator's service learns the change on its next reload.
    const { service: other } = deploymentService(h);
    await other.open();
    try {
      assert.deepEqual(other.states.of(v1.stubId), { active: true, minContainers: 2 });
      await svc.start(ws, v2.id);
      assert.deepEqual(other.states.of(v2.stubId), { active: false, minContainers: 0 }, "not yet reloaded");
      await other.refresh();
      assert.deepEqual(other.states.of(v2.stubId), { active: true, minContainers: 3 });
      assert.deepEqual(other.states.of(v1.stubId), { active: true, minContainers: 0 });
    } finally {
      await other.close();
    }
    await svc.delete(ws, v1.id);
    assert.equal(states.of(v1.stubId), undefined);
    await assert.rejects(svc.get(ws, v1.id), { code: "not_found" });
  });

  test("schedule source: the latest active version of each schedule; since = deployed or started", async () => {
    const ws = h.ws.id;
    const source = new DeploymentScheduleSource(h.store.deployments);
    now.ms = Date.UTC(2031, 5, 1, 12, 0, 0);
    const v1 = await svc.deploy(ws, deployInput("nightly", "schedule", { extra: { when: "@daily" } }));
    now.ms += 60_000;
    const v2 = await svc.deploy(ws, deployInput("nightly", "schedule", { extra: { when: "0 3 * * *" } }));
    const mine = async () =>
      (await source.activeSchedules()).filter((s) => s.stubId === v1.stubId || s.stubId === v2.stubId);
    assert.deepEqual(await mine(), [
      { stubId: v2.stubId, workspaceId: ws, when: "0 3 * * *", since: new Date(now.ms) },
    ]);
    await svc.stop(ws, v2.id);
    assert.deepEqual(
      (await mine()).map((s) => [s.stubId, s.when]),
      [[v1.stubId, "@daily"]],
    );
    await svc.stop(ws, v1.id);
    now.ms += 60_000;
    await svc.start(ws, v1.id);
    assert.deepEqual((await mine())[0]?.since, new Date(now.ms), "started again: no tick before now");
    // Endpoints never appear as schedules.
    const ep = await svc.deploy(ws, deployInput("not-a-schedule", "endpoint"));
    assert.ok(!(await source.activeSchedules()).some((s) => s.stubId === ep.stubId));
  });

  test("a tick submits a task with the JSON body {} (the Berth-Payload-Format header)", async () => {
    const d = await svc.deploy(h.ws.id, deployInput("ticking", "schedule"));
    const taskId = await submitScheduleTick(h.tasks)(d.stubId, h.ws.id, new Date());
    const t = await h.tasks.getTask(h.ws.id, taskId);
    const m = await (await h.nc.jetstreamManager()).streams.getMessage(TASKS_STREAM, {
      seq: t.streamSeq as number,
    });
    assert.equal(Buffer.from(m.data).toString(), "{}");
    assert.equal(m.header.get(TaskHeaders.payloadFormat), "json");
    assert.equal(m.subject, `berth.tasks.${d.stubId}`);
    await h.tasks.cancel(h.ws.id, taskId);
    // The ticker main.ts starts is a real one over the store's tick claims.
    const ticker = createDeploymentTicker({
      db: h.store.db,
      repo: h.store.deployments,
      tasks: h.tasks,
      log: pino({ level: "silent" }),
    });
    await ticker.pollOnce();
    await ticker.stop();
  });

  test("serve: one record per name, version 0, stub {kind}/serve updated in place; never resolved by name", async () => {
    const ws = h.ws.id;
    const first = await svc.deploy(ws, deployInput("dev", "endpoint", { serve: true }));
    const again = await svc.deploy(
      ws,
      deployInput("dev", "endpoint", { serve: true, config: { handler: "app:v2" } }),
    );
    assert.equal(again.id, first.id);
    assert.equal(again.version, 0);
    assert.equal(again.serve, true);
    assert.equal(again.stubId, first.stubId);
    const stub = await h.tasks.getStub(ws, again.stubId);
    assert.deepEqual(
      [stub.name, stub.type, stub.configVersion, stub.config.handler],
      ["dev", "endpoint/serve", 2, "app:v2"],
    );
    assert.equal(svc.urlOf(again), `http://coordinator.test:7070/endpoint/id/${again.id}`);
    await assert.rejects(svc.resolveByName(ws, "dev"), { code: "not_found" });
    assert.equal((await svc.resolveById(again.id)).deployment.serve, true);
    // A deployed version of the same name is separate and is what the name reaches.
    const deployed = await svc.deploy(ws, deployInput("dev", "endpoint"));
    assert.equal(deployed.version, 1);
    assert.equal((await svc.resolveByName(ws, "dev")).deployment.id, deployed.id);
  });

  test("the sweeper deletes serve sessions idle for 10 minutes; requests keep one alive", async () => {
    const ws = h.ws.id;
    now.ms = Date.UTC(2032, 0, 1);
    await svc.sweepServeSessions(); // earlier tests' sessions, long idle at this time
    const idle = await svc.deploy(ws, deployInput("idle", "taskqueue", { serve: true }));
    const busy = await svc.deploy(ws, deployInput("busy-serve", "taskqueue", { serve: true }));
    const deployed = await svc.deploy(ws, deployInput("kept", "taskqueue"));
    const pending = await h.tasks.submit(ws, idle.stubId, [Buffer.from("{}")], { payloadFormat: "json" });
    now.ms += 9 * 60_000;
    await svc.noteRequest(busy.id);
    assert.equal(await svc.sweepServeSessions(), 0, "nothing idle for 10 minutes yet");
    now.ms += 60_000 + 1;
    assert.equal(await svc.sweepServeSessions(), 1);
    await assert.rejects(svc.get(ws, idle.id), { code: "not_found" });
    assert.equal(svc.states.of(idle.stubId), undefined);
    assert.equal((await svc.get(ws, busy.id)).serve, true);
    assert.equal((await svc.get(ws, deployed.id)).active, true, "deployed versions never expire");
    const t = await h.tasks.getTask(ws, pending[0] as string);
    assert.equal(t.status, "FAILED");
    assert.match(t.error?.message ?? "", /serve session idle ended after 10 minutes/);
    now.ms += 10 * 60_000;
    assert.equal(await svc.sweepServeSessions(), 1, "the other one, once it idled too");
  });

  test("scaling events: the last 50 per deployment, and each published on berth.events.{ws}.autoscaler", async () => {
    const d = await svc.deploy(h.ws.id, deployInput("events", "endpoint"));
    const sub = h.nc.subscribe(`berth.events.${h.ws.id}.autoscaler`, { max: 1 });
    const got = (async () => {
      for await (const m of sub) return JSON.parse(new TextDecoder().decode(m.data));
    })();
    for (let i = 0; i < 55; i++)
      svc.recordScaling({
        stubId: d.stubId,
        workspaceId: h.ws.id,
        at: Date.UTC(2030, 0, 1, 0, i),
        from: i,
        to: i + 1,
        reason: "queue_depth",
        queueDepth: i * 2,
      });
    const events = svc.scalingEvents(d.id);
    assert.equal(events.length, 50);
    assert.deepEqual(events[0], {
      at: new Date(Date.UTC(2030, 0, 1, 0, 5)).toISOString(),
      stub_id: d.stubId,
      from: 5,
      to: 6,
      reason: "queue_depth",
      queue_depth: 10,
    });
    assert.equal(events[49]?.to, 55);
    const published = await got;
    assert.equal(published.deployment_id, d.id);
    assert.equal(published.from, 0);
    assert.equal(published.to, 1);
    assert.equal(published.workspace_id, h.ws.id);
  });
});
