// A stub's `secrets=[...]` become its runner containers' environment: the
// container manager resolves them through a real SecretService before every
// start; a missing or unreadable secret fails the waiting tasks with a cause
// naming it instead of leaving them PENDING.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { runnerRequest } from "../../coordinator/containers/runner-request.ts";
import { SecretService } from "../../coordinator/secrets/index.ts";
import { Store } from "../../coordinator/records.ts";
import { capacity, stubRecord, world } from "../containers/fakes.ts";
import { tempDir } from "../helpers/env.ts";
import { randomKey } from "./helpers.ts";

test("runnerRequest puts resolved secrets into env, and no env when there are none", () => {
  const stub = stubRecord("stub-1", { extra: { secrets: ["HF_TOKEN"] } });
  const req = runnerRequest(stub, "ctr-1", undefined, { HF_TOKEN: "hf_x", OTHER: "y" });
  assert.deepEqual(req.env, { HF_TOKEN: "hf_x", OTHER: "y" });
  assert.equal(req.runner?.stubId, "stub-1", "still a runner request");
  assert.equal("env" in runnerRequest(stub, "ctr-2", undefined), false);
  assert.equal("env" in runnerRequest(stub, "ctr-3", undefined, {}), false);
});

describe("container manager resolves a stub's secrets", () => {
  let store: Store;
  let secrets: SecretService;
  let wsId: string;
  const cleanups: (() => unknown)[] = [];

  before(async () => {
    store = await Store.open(`sqlite:${tempDir({ after: (fn) => cleanups.push(fn) })}/b.db`);
    secrets = new SecretService({ db: store.db, key: randomKey() });
    wsId = (await store.workspaces.create("inject")).id;
    await secrets.create(wsId, "HF_TOKEN", "hf_value");
    await secrets.create(wsId, "DB_URL", "postgres://u:p@db/x");
  });
  after(async () => {
    await store?.close();
    for (const fn of cleanups) await fn();
  });

  test("every runner container of the stub gets them; an update reaches the next container", async () => {
    const w = world({ secrets });
    const a = w.addAgent("agent-a", capacity(16, 64));
    w.stubs.set(
      "stub-s",
      stubRecord("stub-s", { workspaceId: wsId, extra: { secrets: ["HF_TOKEN", "DB_URL"] } }),
    );
    w.activity.set("stub-s", 2, 0, wsId);
    await w.tick();
    assert.equal(a.runs.length, 2);
    for (const r of a.runs) assert.deepEqual(r.env, { HF_TOKEN: "hf_value", DB_URL: "postgres://u:p@db/x" });
    assert.deepEqual(w.activity.failed, []);

    await secrets.update(wsId, "HF_TOKEN", "hf_rotated");
    w.activity.set("stub-s", 3, 0, wsId);
    await w.tick();
    assert.equal(a.runs.length, 3);
    assert.equal(a.runs[2]?.env?.HF_TOKEN, "hf_rotated");
    // A stub without secrets gets no env at all.
    w.stubs.set("stub-plain", stubRecord("stub-plain", { workspaceId: wsId }));
    w.activity.set("stub-plain", 1, 0, wsId);
    await w.tick();
    assert.equal(a.runs[3]?.env, undefined);
    await w.mgr.stop();
  });

  test("a missing secret fails the waiting tasks naming it; no container is started", async () => {
    const w = world({ secrets });
    const a = w.addAgent("agent-a", capacity(16, 64));
    w.stubs.set(
      "stub-m",
      stubRecord("stub-m", {
        workspaceId: wsId,
        extra: { secrets: ["HF_TOKEN", "NOT_CREATED", "ALSO_MISSING"] },
      }),
    );
    w.activity.set("stub-m", 2, 0, wsId);
    await w.tick();
    assert.equal(a.runs.length, 0);
    assert.equal(w.mgr.activeContainers("stub-m"), 0);
    // Each of the two placed starts fails alike (the second finds no task left to fail).
    assert.ok(w.activity.failed.length >= 1);
    for (const f of w.activity.failed) {
      assert.equal(f.stubId, "stub-m");
      assert.equal(f.code, "not_found");
      assert.match(
        f.message,
        /^cannot resolve the stub's secrets: secrets NOT_CREATED, ALSO_MISSING not found in this workspace/,
      );
    }
    assert.equal(w.activity.demandOf("stub-m"), undefined, "nothing left waiting");
    await w.mgr.stop();
  });

  test("a secret this coordinator's key cannot open fails the tasks with that cause", async () => {
    const w = world({ secrets: new SecretService({ db: store.db, key: randomKey("/other/secrets.key") }) });
    const a = w.addAgent("agent-a", capacity(16, 64));
    w.stubs.set("stub-k", stubRecord("stub-k", { workspaceId: wsId, extra: { secrets: ["HF_TOKEN"] } }));
    w.activity.set("stub-k", 1, 0, wsId);
    await w.tick();
    assert.equal(a.runs.length, 0);
    assert.equal(w.activity.failed[0]?.code, "failed_precondition");
    assert.match(
      w.activity.failed[0]?.message ?? "",
      /cannot decrypt secret HF_TOKEN .*from \/other\/secrets\.key/,
    );
    await w.mgr.stop();
  });

  test("a manager with no secret store refuses stubs that name secrets", async () => {
    const w = world();
    w.addAgent("agent-a", capacity(16, 64));
    w.stubs.set("stub-n", stubRecord("stub-n", { extra: { secrets: ["HF_TOKEN"] } }));
    w.activity.set("stub-n", 1);
    await w.tick();
    assert.match(
      w.activity.failed[0]?.message ?? "",
      /needs secrets HF_TOKEN but this coordinator has no secret store/,
    );
    await w.mgr.stop();
  });

  test("a store that is down is a transient start failure: tasks keep waiting, the start backs off", async () => {
    const down = {
      resolve: async () => {
        throw new Error("connection refused");
      },
    };
    const w = world({ secrets: down });
    w.addAgent("agent-a", capacity(16, 64));
    w.stubs.set("stub-t", stubRecord("stub-t", { extra: { secrets: ["HF_TOKEN"] } }));
    w.activity.set("stub-t", 1);
    await w.tick();
    assert.deepEqual(w.activity.failed, []);
    assert.equal(w.mgr.startAttempts("stub-t"), 1);
    assert.equal(w.activity.demandOf("stub-t")?.pending, 1);
    await w.mgr.stop();
  });
});
