// GET /api/v1/container/{ws} lists runners and the workspace's live sandboxes
// and pods (the real sandbox service over the shared fake agent), each with
// its kind; terminated ones and other workspaces' are not listed.

import assert from "node:assert/strict";
import { test } from "node:test";
import { containerRoutes } from "../../coordinator/sandboxes/container-routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { bearer } from "../helpers/auth.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { sandboxWorld } from "../sandboxes/fakes.ts";

test("sandboxes and pods are listed among the workspace's containers, with their kind", async (t) => {
  const w = await sandboxWorld(t);
  w.addAgent("agent-a");
  const sb = await w.svc.create(w.ws, (await w.stub("sb", "sandbox")).id);
  const pod = await w.svc.create(
    w.ws,
    (await w.stub("pod", "pod", { entrypoint: ["python", "-m", "http.server"] })).id,
  );
  const gone = await w.svc.create(w.ws, (await w.stub("gone", "sandbox")).id);
  await w.svc.terminate(w.ws, gone.sandboxId);
  const runner = {
    id: "ctr-runner",
    stubId: "stub-fn",
    workspaceId: w.ws,
    agentId: "agent-a",
    state: "running" as const,
    since: Date.parse("2020-01-01T00:00:00Z"),
  };
  const app = routesApp();
  await app.register(
    tokenScope(
      w.store.tokens,
      containerRoutes({
        containers: { list: () => [runner, { ...runner, id: "ctr-other", workspaceId: w.otherWs }] },
        sandboxes: (ws) => w.svc.liveContainers(ws),
      }),
    ),
  );
  t.after(() => app.close());
  const token = (await w.store.tokens.create(w.ws)).secret;
  const ext = (await w.store.workspaces.get(w.ws))?.externalId;
  const list = async (query = "") => {
    const r = await app.inject({
      method: "GET",
      url: `/api/v1/container/${ext}${query}`,
      headers: bearer(token),
    });
    assert.equal(r.statusCode, 200, r.body);
    return (r.json() as { containers: { id: string; kind: string; status: string; stub_id: string }[] })
      .containers;
  };
  const all = await list();
  const byId = new Map(all.map((c) => [c.id, c]));
  assert.deepEqual(new Set(byId.keys()), new Set([sb.sandboxId, pod.sandboxId, "ctr-runner"]));
  assert.equal(byId.get(sb.sandboxId)?.kind, "sandbox");
  assert.equal(byId.get(pod.sandboxId)?.kind, "pod");
  assert.equal(byId.get(pod.sandboxId)?.status, "running");
  assert.equal(byId.get("ctr-runner")?.kind, "runner");
  assert.deepEqual(
    (await list(`?stub_id=${pod.stubId}`)).map((c) => c.id),
    [pod.sandboxId],
  );
  // The runner's since (2020) is the oldest: last page of one.
  assert.equal((await list("?limit=3")).at(-1)?.id, "ctr-runner");
});
