// Roles and narrowed tokens on every route (docs/roles.md), read from the
// app's own OpenAPI document: each token-authenticated operation declares
// the roles that may call it (x-berth-role), and a token of each role of
// workspace A gets exactly that: permission_denied where the route's
// declaration leaves its role out, anything else where it does not.
// Workspace B's tokens, whatever their role, find A's {ws} routes not found.
// A token narrowed to one deployment reaches that deployment only.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import Fastify from "fastify";
import { type RouteAccess, requireDeclarations, rolesWith } from "../../coordinator/http/index.ts";
import type { Role } from "../../coordinator/store/index.ts";
import { type FuzzFixture, startFuzzFixture } from "../fuzz/fixture.ts";
import { deployInput } from "../deployments/helpers.ts";
import { bearer } from "../helpers/auth.ts";
import { type JsonSchema, sample } from "../helpers/schema-sample.ts";

interface Operation {
  method: string;
  path: string;
  security?: unknown[];
  parameters?: { in: string; name: string; required?: boolean; schema?: JsonSchema }[];
  requestBody?: { content?: Record<string, { schema?: JsonSchema }> };
  "x-berth-role"?: string[];
  "x-berth-access"?: RouteAccess["needs"];
  "x-berth-deployment"?: boolean;
}

const ROLE_NAMES: Role[] = ["admin", "developer", "runner", "viewer"];

describe("roles on every route (OpenAPI-enumerated)", () => {
  let fz: FuzzFixture;
  let ops: Operation[];
  let base: string;
  const tokens: Record<"a" | "b", Record<Role, string>> = { a: {} as never, b: {} as never };
  let narrowed: string;
  let queueId: string;
  const cleanups: (() => unknown)[] = [];

  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  before(async () => {
    fz = await startFuzzFixture({ after: (fn) => cleanups.push(fn) });
    const { x } = fz.f;
    for (const side of ["a", "b"] as const) {
      for (const role of ROLE_NAMES) {
        tokens[side][role] = (
          await x.h.store.tokens.create(x[side].id, { name: `${side}-${role}`, role })
        ).secret;
      }
    }
    queueId = (await x.deployments.deploy(x.a.id, deployInput("canary-queue", "taskqueue"))).id;
    narrowed = (
      await x.h.store.tokens.create(x.a.id, {
        name: "web app",
        role: "runner",
        deployments: [x.seeded.deployment.name, "canary-queue"],
      })
    ).secret;
    const r = await x.app.inject({ method: "GET", url: "/api/v1/openapi.json" });
    const doc = r.json() as { paths: Record<string, Record<string, Omit<Operation, "method" | "path">>> };
    ops = Object.entries(doc.paths)
      .flatMap(([path, item]) =>
        Object.entries(item)
          .filter(([m]) => ["get", "post", "put", "patch", "delete"].includes(m))
          .map(([m, op]) => ({ ...op, method: m.toUpperCase(), path })),
      )
      // Routes that take no token (health, agent join) are not the token hook's.
      .filter((op) => !(Array.isArray(op.security) && op.security.length === 0));
    base = `http://${await fz.f.listen()}`;
  });

  const paramValue = (path: string, name: string, v: Record<string, string>): string => {
    if (name === "*") return "canary.txt";
    // A task queue's id (the endpoint deployment's id is no task queue: not found before any token check).
    if (path.startsWith("/taskqueue/id/")) return queueId;
    if (path.startsWith("/taskqueue/"))
      return name === "name" ? (v.deploymentName as string) : (v.version as string);
    if (path.startsWith("/api/v1/gateway/sandboxes/") && name === "id") return v.sandboxId as string;
    if (path.startsWith("/api/v1/volume/") && name === "name") return v.volume as string;
    if (path.startsWith("/api/v1/bot/") && name === "name") return v.botName as string;
    return v[name] ?? "x";
  };
  const urlOf = (op: Operation, v: Record<string, string>) => {
    const path = op.path.replace(/\{([^}]+)\}/g, (_m, name: string) =>
      encodeURIComponent(paramValue(op.path, name, v)),
    );
    const q = new URLSearchParams();
    for (const p of op.parameters ?? [])
      if (p.in === "query" && p.required) q.set(p.name, v[p.name] ?? String(sample(p.schema)));
    return q.size > 0 ? `${path}?${q}` : path;
  };
  /** The role check's refusal: 403 permission_denied (the SDK gateway's JSON routes answer it 200 with ok:false). */
  const refused = (op: Operation, r: { status: number; code: string | undefined }) =>
    r.code === "permission_denied" &&
    (r.status === 403 || (op.path.startsWith("/api/v1/gateway/") && r.status === 200));
  const isStream = (op: Operation) => /\/(stream|subscribe)$/.test(op.path);
  /** Status and error code of one call; a stream is read up to its status line, then dropped. */
  const call = async (op: Operation, token: string, v: Record<string, string>) => {
    const url = urlOf(op, v);
    const schema = op.requestBody?.content?.["application/json"]?.schema;
    const payload = op.requestBody ? (sample(schema) as object) : undefined;
    if (isStream(op)) {
      const ac = new AbortController();
      const r = await fetch(`${base}${url}`, { headers: bearer(token), signal: ac.signal });
      const code = r.status >= 400 ? ((await r.json()) as { error: { code: string } }).error.code : undefined;
      ac.abort();
      return { status: r.status, code, url };
    }
    const r = await fz.f.x.app.inject({
      method: op.method as "GET",
      url,
      headers: bearer(token),
      ...(payload !== undefined ? { payload } : {}),
    });
    let code: string | undefined;
    try {
      const body = r.json() as { error?: { code?: string } | string; ok?: boolean };
      code = typeof body.error === "object" ? body.error.code : undefined;
    } catch {}
    return { status: r.statusCode, code, url };
  };

  test("every token-authenticated route declares the roles that may call it", () => {
    assert.ok(ops.length > 80, `${ops.length} operations`);
    for (const op of ops) {
      const what = `${op.method} ${op.path}`;
      assert.ok(op["x-berth-access"], `${what} declares its access`);
      const roles = op["x-berth-role"] ?? [];
      assert.ok(roles.length > 0, `${what} names its roles`);
      assert.deepEqual(
        roles,
        op["x-berth-access"] === "cluster" ? ["cluster-admin"] : rolesWith(op["x-berth-access"] as never),
        what,
      );
    }
    // A few the role table of docs/roles.md names.
    const roleOf = (m: string, p: string) =>
      ops.find((o) => o.method === m && o.path === p)?.["x-berth-role"];
    assert.deepEqual(roleOf("GET", "/api/v1/deployment/{ws}"), ["admin", "developer", "viewer"]);
    assert.deepEqual(roleOf("DELETE", "/api/v1/deployment/{ws}/{id}"), ["admin", "developer"]);
    assert.deepEqual(roleOf("POST", "/taskqueue/{name}"), ["admin", "developer", "runner"]);
    assert.deepEqual(roleOf("GET", "/api/v1/workspace/current/signature-token"), ["admin"]);
    assert.deepEqual(roleOf("POST", "/api/v1/agents/{agentId}/revoke"), ["cluster-admin"]);
  });

  test("a route without a declaration stops the app from being built", async () => {
    const app = Fastify();
    await assert.rejects(async () => {
      await app.register(async (scope) => {
        requireDeclarations(scope);
        scope.get("/declared", { config: { access: { needs: "read" } } }, async () => "ok");
        scope.get("/undeclared", async () => "no");
      });
      await app.ready();
    }, /route GET \/undeclared declares no access/);
    await app.close().catch(() => {});
  });

  test("a token narrowed to one deployment: that deployment only, on the routes that name one", async () => {
    const v = fz.values.a;
    const name = v.deploymentName as string;
    for (const op of ops) {
      const r = await call(op, narrowed, v);
      const what = `${op.method} ${op.path} (${r.url}) -> ${r.status} ${r.code}`;
      if (op["x-berth-deployment"]) assert.ok(!(r.status === 403 && r.code === "permission_denied"), what);
      else assert.ok(refused(op, r), what);
    }
    const enqueue = (path: string, token = narrowed) =>
      fz.f.x.app.inject({ method: "POST", url: path, headers: bearer(token), payload: { x: 1 } });
    const queued = await enqueue("/taskqueue/canary-queue");
    assert.equal(queued.statusCode, 200, queued.body);
    // It polls the task it queued; a task of no deployment it names is absent to it.
    const poll = (id: string, token = narrowed) =>
      fz.f.x.app.inject({ method: "GET", url: `/v2/task/${id}/`, headers: bearer(token) });
    const mine = await poll(queued.json().task_id);
    assert.deepEqual([mine.statusCode, mine.json().id], [200, queued.json().task_id], mine.body);
    const direct = (await enqueue("/taskqueue/canary-queue", tokens.a.developer)).json().task_id;
    assert.equal((await poll(direct)).statusCode, 200, "a task of its deployment, whoever queued it");
    const unnamed = fz.values.a.taskId as string;
    const absent = await poll(unnamed);
    assert.deepEqual([absent.statusCode, absent.json().error.code], [404, "not_found"], absent.body);
    assert.equal((await poll(unnamed, tokens.a.runner)).statusCode, 200, "an unnarrowed runner reads it");
    const other = await enqueue("/taskqueue/other-deployment");
    assert.deepEqual([other.statusCode, other.json().error.code], [403, "permission_denied"]);
    assert.match(other.json().error.message, new RegExp(`narrowed to deployment ${name}, canary-queue`));
    // The endpoint data plane checks it too (by name and by id).
    const endpoint = (path: string, token = narrowed) =>
      fetch(`${base}${path}`, {
        method: "POST",
        headers: { ...bearer(token), "content-type": "application/json" },
        body: '{"x":1}',
      });
    assert.equal((await endpoint(`/endpoint/${name}`)).status, 200);
    assert.equal((await endpoint(`/endpoint/id/${v.id}`)).status, 200);
    const otherEndpoint = await endpoint("/endpoint/other-deployment");
    assert.equal(otherEndpoint.status, 403);
    assert.equal(
      ((await otherEndpoint.json()) as { error: { code: string } }).error.code,
      "permission_denied",
    );
    // A viewer may not invoke at all; a runner may.
    assert.equal((await endpoint(`/endpoint/${name}`, tokens.a.viewer)).status, 403);
    assert.equal((await endpoint(`/endpoint/${name}`, tokens.a.runner)).status, 200);
  });

  test("tokens: a role in token_info, made no stronger than their maker, admin tokens managed by admins", async () => {
    const { app } = fz.f.x;
    const make = (token: string, body: object) =>
      app.inject({ method: "POST", url: "/api/v1/token", headers: bearer(token), payload: body });
    const web = await make(tokens.a.developer, { name: "web", role: "runner", deployments: ["canary-web"] });
    assert.equal(web.statusCode, 201, web.body);
    assert.deepEqual(
      [web.json().token_info.role, web.json().token_info.deployments, web.json().token_info.admin],
      ["runner", ["canary-web"], false],
    );
    assert.equal((await make(tokens.a.developer, {})).json().token_info.role, "developer");
    const refused = await make(tokens.a.developer, { role: "admin" });
    assert.deepEqual([refused.statusCode, refused.json().error.code], [403, "permission_denied"]);
    assert.equal((await make(tokens.a.viewer, { role: "viewer" })).statusCode, 403);
    const wsAdmin = await make(tokens.a.admin, { role: "admin" });
    assert.equal(wsAdmin.statusCode, 201);
    // A workspace admin is no cluster admin: neither it nor its tokens reach the fleet.
    assert.equal((await make(tokens.a.admin, { admin: true })).statusCode, 403);
    const fleet = await app.inject({ method: "GET", url: "/api/v1/agents", headers: bearer(tokens.a.admin) });
    assert.equal(fleet.statusCode, 403);
    const revoke = (token: string, id: string) =>
      app.inject({ method: "DELETE", url: `/api/v1/token/${id}`, headers: bearer(token) });
    const adminId = wsAdmin.json().token_info.id as string;
    assert.equal((await revoke(tokens.a.developer, adminId)).statusCode, 403);
    assert.equal((await revoke(tokens.a.admin, adminId)).statusCode, 200);
    const list = await app.inject({ method: "GET", url: "/api/v1/token", headers: bearer(tokens.a.viewer) });
    const roles = new Map(
      (list.json().tokens as { name: string; role: string }[]).map((t) => [t.name, t.role] as const),
    );
    assert.equal(roles.get("a-runner"), "runner");
  });

  test("each role of A: allowed where the route's declaration names it, permission_denied elsewhere", async () => {
    const v = fz.values.a;
    let allowed = 0;
    let denied = 0;
    for (const role of ROLE_NAMES) {
      for (const op of ops) {
        const may = (op["x-berth-role"] ?? []).includes(role);
        const r = await call(op, tokens.a[role], v);
        const what = `${role}: ${op.method} ${op.path} (${r.url}) -> ${r.status} ${r.code}`;
        if (may) {
          allowed++;
          // Allowed: whatever the route answers, it is not the role check's refusal.
          assert.ok(!(r.status === 403 && r.code === "permission_denied"), what);
          assert.ok(r.status !== 401, what);
        } else {
          denied++;
          assert.ok(refused(op, r), what);
        }
      }
    }
    assert.ok(allowed > 100 && denied > 100, `${allowed} allowed, ${denied} denied`);
  });

  test("the cluster admin's token reaches the cluster routes", async () => {
    for (const op of ops.filter((o) => o["x-berth-access"] === "cluster")) {
      const r = await call(op, fz.tokens.admin, fz.adminValues);
      assert.ok(
        !(r.status === 403 && r.code === "permission_denied"),
        `${op.method} ${op.path}: ${r.status} ${r.code}`,
      );
    }
  });

  test("B's tokens of every role find A's {ws} routes not found", async () => {
    const v = fz.values.a;
    for (const role of ROLE_NAMES) {
      for (const op of ops.filter((o) => o.path.includes("{ws}"))) {
        const r = await call(op, tokens.b[role], v);
        assert.deepEqual([r.status, r.code], [404, "not_found"], `${role} of B: ${op.method} ${r.url}`);
      }
    }
  });
});
