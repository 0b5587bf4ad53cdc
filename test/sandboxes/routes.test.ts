// The sandbox and pod gateway routes through inject(), over the real sandbox
// service and SQLite store with fake agents: the answers of docs/sandboxes.md,
// workspace scoping, every refusal, and the raw byte routes (output, files).

import assert from "node:assert/strict";
import { test } from "node:test";
import type { FastifyInstance } from "fastify";
import { gatewayPodRoutes } from "../../coordinator/sandboxes/pod-routes.ts";
import { gatewaySandboxRoutes } from "../../coordinator/sandboxes/routes.ts";
import { gatewayScope } from "../../coordinator/http/scopes.ts";
import { type SandboxWorld, sandboxWorld } from "./fakes.ts";
import { routesApp } from "../helpers/routes-app.ts";
import { bearer } from "../helpers/auth.ts";
import { waitUntil } from "../helpers/wait.ts";

async function sandboxApp(w: SandboxWorld): Promise<FastifyInstance> {
  const app = routesApp();
  await app.register(gatewayScope(w.store.tokens, gatewaySandboxRoutes(w.svc), gatewayPodRoutes(w.svc)));
  return app;
}

async function setup(t: { after: (fn: () => unknown) => void }) {
  const w = await sandboxWorld(t);
  const agent = w.addAgent("agent-a");
  const app = await sandboxApp(w);
  t.after(() => app.close());
  const made = await w.store.tokens.create(w.ws);
  const token = made.secret;
  const other = (await w.store.tokens.create(w.otherWs)).secret;
  /** The token a sandbox's record says started it (usage per member, docs/usage.md). */
  const startedBy = async (id: string) =>
    (await w.store.db.selectFrom("sandboxes").select("token_id").where("id", "=", id).executeTakeFirst())
      ?.token_id;
  const call = async (
    method: "GET" | "POST" | "PUT" | "DELETE",
    url: string,
    payload?: unknown,
    o: { token?: string; raw?: Buffer } = {},
  ) => {
    const r = await app.inject({
      method,
      url: `/api/v1/gateway${url}`,
      headers: {
        ...bearer(o.token ?? token),
        ...(o.raw ? { "content-type": "application/octet-stream" } : {}),
      },
      ...(o.raw ? { payload: o.raw } : payload !== undefined ? { payload: payload as object } : {}),
    });
    return {
      status: r.statusCode,
      body: String(r.headers["content-type"] ?? "").includes("json") ? r.json() : r.body,
      headers: r.headers,
    };
  };
  return { w, agent, call, other, tokenId: made.record.id, startedBy };
}

const errorCode = (r: { status: number; body: { ok?: boolean; error?: { code: string } } }) => [
  r.status,
  r.body.ok,
  r.body.error?.code,
];

test("create, get, ports, network, ttl, terminate; another workspace's token sees nothing", async (t) => {
  const { w, agent, call, other, tokenId, startedBy } = await setup(t);
  const stub = await w.stub("sb", "sandbox", { ports: [8000] });
  const created = await call("POST", "/sandboxes", { stub_id: stub.id });
  assert.equal(created.status, 200);
  assert.equal(created.body.ok, true);
  const id = created.body.sandbox_id as string;
  assert.equal(await startedBy(id), tokenId);
  assert.equal(created.body.container_id, id);
  assert.deepEqual(created.body.urls, { 8000: `https://berth.example/port/${id}/8000/` });
  assert.equal(typeof created.body.expires_at, "string");

  const got = await call("GET", `/sandboxes/${id}`);
  assert.deepEqual(
    [got.body.status, got.body.stub_id, got.body.ttl_seconds, got.body.network],
    ["running", stub.id, 600, { block_network: false, allow_list: null }],
  );
  for (const [m, u, b] of [
    ["GET", `/sandboxes/${id}`],
    ["POST", `/sandboxes/${id}/terminate`],
    ["GET", `/sandboxes/${id}/ports`],
    ["POST", `/sandboxes/${id}/processes`, { args: ["true"] }],
    ["GET", `/sandboxes/${id}/files/stat?path=/x`],
    ["GET", `/sandboxes/${id}/files/content?path=/x`],
    ["POST", "/sandboxes", { stub_id: stub.id }],
  ] as const) {
    const r = await call(m, u, b, { token: other });
    assert.equal(r.body.error?.code, "not_found", `${m} ${u} with another workspace's token`);
  }

  assert.deepEqual((await call("GET", `/sandboxes/${id}/ports`)).body.urls, {
    8000: `https://berth.example/port/${id}/8000/`,
  });
  agent.withExposePort();
  const exposed = await call("POST", `/sandboxes/${id}/ports`, { port: 9000 });
  assert.deepEqual([exposed.body.port, exposed.body.url], [9000, `https://berth.example/port/${id}/9000/`]);
  assert.equal(
    errorCode(await call("POST", `/sandboxes/${id}/ports`, { port: 70000 }))[2],
    "invalid_request",
  );

  const blocked = await call("POST", `/sandboxes/${id}/network`, { block_network: true });
  assert.deepEqual(blocked.body.network, { block_network: true, allow_list: null });
  const allowed = await call("POST", `/sandboxes/${id}/network`, {
    allow_list: ["2001:db8::1/32", "10.0.0.0/8"],
  });
  assert.deepEqual(allowed.body.network.allow_list, ["2001:db8::/32", "10.0.0.0/8"]);
  const bad = [
    { block_network: true, allow_list: ["10.0.0.0/8"] },
    { allow_list: Array.from({ length: 11 }, (_, i) => `10.${i}.0.0/16`) },
    { allow_list: ["10.0.0.0"] },
  ];
  for (const b of bad) {
    const r = await call("POST", `/sandboxes/${id}/network`, b);
    assert.deepEqual(errorCode(r), [200, false, "invalid_request"], JSON.stringify(b));
  }
  assert.equal(agent.policies.length, 2);

  assert.equal((await call("POST", `/sandboxes/${id}/ttl`, { ttl_seconds: -1 })).body.expires_at, null);
  assert.equal(
    errorCode(await call("POST", `/sandboxes/${id}/ttl`, { ttl_seconds: 0 }))[2],
    "invalid_request",
  );

  assert.deepEqual((await call("POST", `/sandboxes/${id}/terminate`)).body, { ok: true, terminated: true });
  assert.deepEqual(errorCode(await call("POST", `/sandboxes/${id}/terminate`)), [
    200,
    false,
    "sandbox_terminated",
  ]);
  assert.equal((await call("GET", `/sandboxes/${id}/ports`)).body.error.code, "sandbox_terminated");
  assert.equal((await call("GET", `/sandboxes/${id}`)).body.status, "terminated");
  assert.equal((await call("GET", "/sandboxes/ctr-unknown")).body.error.code, "not_found");
  // The raw routes keep the error's HTTP status.
  const raw = await call("GET", `/sandboxes/${id}/processes/1/output`);
  assert.deepEqual(errorCode(raw), [412, false, "sandbox_terminated"]);
});

test("a stub with a bad allow_list or both options is refused before any container starts", async (t) => {
  const { w, agent, call } = await setup(t);
  for (const [name, extra] of [
    ["both", { block_network: true, allow_list: ["10.0.0.0/8"] }],
    ["eleven", { allow_list: Array.from({ length: 11 }, (_, i) => `10.${i}.0.0/16`) }],
    ["notcidr", { allow_list: ["not-a-cidr"] }],
  ] as const) {
    const stub = await w.stub(name, "sandbox", extra as never);
    const r = await call("POST", "/sandboxes", { stub_id: stub.id });
    assert.deepEqual(errorCode(r), [200, false, "invalid_request"], name);
  }
  assert.equal(agent.runs.length, 0);
  assert.equal((await call("POST", "/sandboxes", { stub_id: "stub-none" })).body.error.code, "not_found");
  assert.equal((await call("POST", "/sandboxes", {})).body.error.code, "invalid_request");
});

test("processes: exec, output (raw, offsets, follow), stdin, kill, wait, unknown pid", async (t) => {
  const { w, agent, call } = await setup(t);
  const id = (await call("POST", "/sandboxes", { stub_id: (await w.stub("sb", "sandbox")).id })).body
    .sandbox_id as string;
  const started = await call("POST", `/sandboxes/${id}/processes`, {
    args: ["python3", "-c", "print(1+1)"],
    cwd: "/tmp",
  });
  assert.deepEqual(started.body, { ok: true, pid: 1 });
  const e = agent.execs[0];
  assert.ok(e);
  e.write("stdout", "2\n");
  e.write("stderr", "oops\n");
  const waited = call("POST", `/sandboxes/${id}/processes/1/wait`, {});
  const followed = call("GET", `/sandboxes/${id}/processes/1/output?stream=combined&follow=true`);
  const status = await call("GET", `/sandboxes/${id}/processes/1`);
  assert.deepEqual([status.body.exit_code, status.body.status, status.body.cwd], [-1, "running", "/tmp"]);
  e.write("stdout", "done\n");
  e.finish(0);
  assert.deepEqual((await waited).body, { ok: true, exit_code: 0, status: "exited" });
  const f = await followed;
  assert.equal(f.status, 200);
  assert.equal(f.body, "2\noops\ndone\n");
  assert.equal(f.headers["x-output-start"], "0");
  assert.equal((await call("GET", `/sandboxes/${id}/processes/1/output?stream=stdout`)).body, "2\ndone\n");
  assert.equal((await call("GET", `/sandboxes/${id}/processes/1/output?stream=stderr`)).body, "oops\n");
  assert.equal(
    (await call("GET", `/sandboxes/${id}/processes/1/output?stream=stdout&offset=2`)).body,
    "done\n",
  );
  assert.equal((await call("GET", `/sandboxes/${id}/processes/1/output?stream=nope`)).status, 400);

  await call("POST", `/sandboxes/${id}/processes`, { args: ["cat"] });
  const written = await call("POST", `/sandboxes/${id}/processes/2/stdin?eof=true`, undefined, {
    raw: Buffer.from("hello"),
  });
  assert.deepEqual(written.body, { ok: true, written: 5 });
  assert.equal(Buffer.concat(agent.execs[1]?.stdin ?? []).toString(), "hello");
  assert.equal(agent.execs[1]?.stdinClosed, true);
  const timedOut = await call("POST", `/sandboxes/${id}/processes/2/wait`, { timeout_seconds: 0.01 });
  assert.deepEqual(timedOut.body, { ok: true, exit_code: -1, status: "running" });
  assert.deepEqual((await call("POST", `/sandboxes/${id}/processes/2/kill`, { signal: "SIGTERM" })).body, {
    ok: true,
    killed: true,
  });
  assert.deepEqual(agent.execs[1]?.signals, ["SIGTERM"]);
  const list = await call("GET", `/sandboxes/${id}/processes`);
  assert.deepEqual(
    list.body.processes.map((p: { pid: number; status: string }) => [p.pid, p.status]),
    [
      [1, "exited"],
      [2, "killed"],
    ],
  );
  for (const u of ["/processes/9", "/processes/9/kill", "/processes/9/wait"]) {
    const r = await call(
      u.endsWith("9") ? "GET" : "POST",
      `/sandboxes/${id}${u}`,
      u.endsWith("9") ? undefined : {},
    );
    assert.deepEqual(errorCode(r), [200, false, "process_not_found"], u);
  }
  assert.deepEqual(errorCode(await call("GET", `/sandboxes/${id}/processes/9/output`)), [
    404,
    false,
    "process_not_found",
  ]);
  assert.equal(
    (await call("POST", `/sandboxes/${id}/processes`, { args: [] })).body.error.code,
    "invalid_request",
  );
});

test("files pass through to the agent: upload streams, download is raw, errors name the path", async (t) => {
  const { w, call } = await setup(t);
  const id = (await call("POST", "/sandboxes", { stub_id: (await w.stub("sb", "sandbox")).id })).body
    .sandbox_id as string;
  const up = await call("PUT", `/sandboxes/${id}/files/content?path=/work/a.txt&mode=644`, undefined, {
    raw: Buffer.from("hello world"),
  });
  assert.equal(up.body.ok, true);
  assert.deepEqual(
    [up.body.file.path, up.body.file.size, up.body.file.permissions],
    ["/work/a.txt", 11, "-rw-r--r--"],
  );
  assert.equal(up.body.file.mod_time, "2030-01-01T00:00:00.000Z");
  const down = await call("GET", `/sandboxes/${id}/files/content?path=/work/a.txt`);
  assert.deepEqual(
    [down.status, down.body, down.headers["content-type"]],
    [200, "hello world", "application/octet-stream"],
  );
  assert.equal((await call("GET", `/sandboxes/${id}/files/stat?path=/work/a.txt`)).body.file.name, "a.txt");
  assert.deepEqual(
    (await call("GET", `/sandboxes/${id}/files/list?path=/work`)).body.files.map(
      (f: { name: string }) => f.name,
    ),
    ["a.txt"],
  );
  const missing = await call("GET", `/sandboxes/${id}/files/content?path=/nope`);
  assert.deepEqual(errorCode(missing), [404, false, "path_not_found"]);
  assert.match(missing.body.error.message, /\/nope/);
  assert.equal(missing.body.error.details.path, "/nope");
  assert.deepEqual(errorCode(await call("GET", `/sandboxes/${id}/files/stat?path=/nope`)), [
    200,
    false,
    "path_not_found",
  ]);
  assert.deepEqual(errorCode(await call("DELETE", `/sandboxes/${id}/directories?path=/`)), [
    200,
    false,
    "path_invalid",
  ]);
  assert.deepEqual((await call("DELETE", `/sandboxes/${id}/files?path=/work/a.txt`)).body, {
    ok: true,
    deleted: true,
  });
  assert.equal((await call("POST", `/sandboxes/${id}/directories`, { path: "/d" })).body.file.is_dir, true);
  assert.deepEqual((await call("POST", `/sandboxes/${id}/files/find`, { path: "/", pattern: "x" })).body, {
    ok: true,
    matches: [],
  });
  assert.equal(
    (
      await call("PUT", `/sandboxes/${id}/files/content?path=/x&mode=999`, undefined, {
        raw: Buffer.from(""),
      })
    ).body.error.code,
    "invalid_request",
  );
});

test("pods: create(entrypoint=...) answers ok, container_id, url; a sandbox stub is refused there", async (t) => {
  const { w, agent, call, tokenId, startedBy } = await setup(t);
  const pod = await w.stub("pod", "pod", { ports: [9000, 8000] });
  const r = await call("POST", "/pods", {
    stub_id: pod.id,
    entrypoint: ["python3", "-m", "http.server", "9000"],
  });
  assert.equal(r.body.ok, true);
  const id = r.body.container_id as string;
  assert.equal(await startedBy(id), tokenId);
  assert.equal(r.body.url, `https://berth.example/port/${id}/9000/`);
  assert.deepEqual(agent.runs[0]?.args, ["python3", "-m", "http.server", "9000"]);
  assert.equal((await call("GET", `/sandboxes/${id}`)).body.kind, "pod");
  assert.equal((await call("POST", "/pods", { stub_id: pod.id })).body.error.code, "invalid_request");
  const sb = await w.stub("sb", "sandbox");
  assert.equal((await call("POST", "/pods", { stub_id: sb.id })).body.error.code, "invalid_request");
  assert.equal((await call("POST", "/sandboxes", { stub_id: pod.id })).body.error.code, "invalid_request");
});

test("pods: one whose entrypoint exits 0 is created, and GET /pods/{id} reads its status and exit code", async (t) => {
  const w = await sandboxWorld(t, { podSettleMs: 60_000 });
  const agent = w.addAgent("agent-a");
  const app = await sandboxApp(w);
  t.after(() => app.close());
  const token = (await w.store.tokens.create(w.ws)).secret;
  const other = (await w.store.tokens.create(w.otherWs)).secret;
  const call = async (method: "GET" | "POST", url: string, payload?: object, as = token) => {
    const r = await app.inject({ method, url: `/api/v1/gateway${url}`, headers: bearer(as), payload });
    return { status: r.statusCode, body: r.json() };
  };
  const pod = await w.stub("batch", "pod", { ports: [8000] });
  const creating = call("POST", "/pods", { stub_id: pod.id, entrypoint: ["python", "-c", "print(1)"] });
  const id = await waitUntil(
    () => agent.runs[0]?.id && agent.containers.has(agent.runs[0].id) && agent.runs[0].id,
    {
      what: "the pod's container",
    },
  );
  agent.exit(id, 0);
  const r = await creating;
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(
    [r.body.ok, r.body.container_id, r.body.url, r.body.status, r.body.exit_code],
    [true, id, `https://berth.example/port/${id}/8000/`, "terminated", 0],
  );
  const got = await call("GET", `/pods/${id}`);
  assert.deepEqual(
    [got.body.ok, got.body.kind, got.body.status, got.body.exit_code, got.body.terminated_reason],
    [true, "pod", "terminated", 0, "its container exited (code 0)"],
  );
  assert.equal((await call("GET", `/sandboxes/${id}`)).body.exit_code, 0);
  assert.deepEqual(errorCode(await call("GET", `/pods/${id}`, undefined, other)), [200, false, "not_found"]);
  const sb = await w.stub("sb", "sandbox");
  const sandbox = await w.svc.create(w.ws, sb.id);
  assert.deepEqual(errorCode(await call("GET", `/pods/${sandbox.sandboxId}`)), [200, false, "not_found"]);
});
