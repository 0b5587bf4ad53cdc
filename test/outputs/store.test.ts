// The coordinator's output store and public route: an upload in chunks is
// an output only once committed with the right size; a task lists its
// outputs; a signed URL serves the file without a token until it expires,
// then 404s, and the sweeper deletes the file; a wrong signature, another
// workspace or a tampered expiry is 404 alike.

import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { outputPublicRoutes } from "../../coordinator/outputs/routes.ts";
import { OutputStore } from "../../coordinator/outputs/output-store.ts";
import { tempDir } from "../helpers/env.ts";
import { routesApp } from "../helpers/routes-app.ts";

function setup(t: { after: (fn: () => unknown) => void }) {
  const root = join(tempDir(t), "outputs");
  let now = Date.parse("2026-11-26T10:00:00Z");
  const store = new OutputStore({
    root,
    signingKey: Buffer.alloc(32, 7),
    publicUrl: "http://coord.example",
    clock: () => now,
  });
  const app = routesApp();
  void app.register(outputPublicRoutes(store));
  t.after(() => app.close());
  return { root, store, app, advance: (ms: number) => (now += ms) };
}

async function save(store: OutputStore, ws: string, bytes: Buffer, name = "a.bin", taskId = "task-1") {
  const up = await store.begin(ws);
  // Out of order, as chunks from different coordinators may land.
  const half = Math.floor(bytes.length / 2);
  await store.write(ws, up, half, bytes.subarray(half));
  await store.write(ws, up, 0, bytes.subarray(0, half));
  return store.commit(ws, up, { name, taskId, size: bytes.length });
}

test("an upload becomes an output on commit; the task lists it; another workspace does not see it", async (t) => {
  const { root, store } = setup(t);
  const bytes = Buffer.from("x".repeat(1000) + "y".repeat(1001));
  const rec = await save(store, "ws-a", bytes);
  assert.match(rec.id, /^out-[0-9a-f]{24}$/);
  assert.equal(rec.size, bytes.length);
  assert.deepEqual(
    (await store.ofTask("ws-a", "task-1")).map((o) => [o.id, o.name, o.size, o.expires_at]),
    [[rec.id, "a.bin", bytes.length, null]],
  );
  assert.deepEqual(await store.ofTask("ws-b", "task-1"), []);
  await assert.rejects(store.get("ws-b", rec.id), { code: "not_found" });
  assert.deepEqual(readdirSync(join(root, "ws-a", "uploads")), [], "no upload file left");

  const up = await store.begin("ws-a");
  await store.write("ws-a", up, 0, Buffer.from("short"));
  await assert.rejects(
    store.commit("ws-a", up, { name: "b", taskId: "", size: 99 }),
    /5 bytes where 99 were sent/,
  );
  await assert.rejects(
    store.commit("ws-a", await store.begin("ws-a"), { name: "../x", taskId: "", size: 0 }),
    {
      code: "invalid_request",
    },
  );
});

test("a signed URL serves the file without a token until it expires; then 404, and the sweeper deletes it", async (t) => {
  const { root, store, app, advance } = setup(t);
  const bytes = Buffer.from("hello output");
  const rec = await save(store, "ws-a", bytes, "result.txt");
  const { url, expires_at } = await store.publicUrl("ws-a", rec.id, 600);
  assert.equal(expires_at, "2026-11-26T10:10:00.000Z");
  assert.match(
    url,
    new RegExp(`^http://coord\\.example/output/ws-a/${rec.id}/result\\.txt\\?expires=\\d+&sig=[0-9a-f]{64}$`),
  );
  const path = url.slice("http://coord.example".length);
  const ok = await app.inject({ method: "GET", url: path });
  assert.equal(ok.statusCode, 200);
  assert.equal(ok.body, "hello output");
  assert.match(String(ok.headers["content-disposition"]), /result\.txt/);
  assert.equal((await store.ofTask("ws-a", "task-1"))[0]?.expires_at, expires_at);

  const tampered = [
    path.replace(/sig=[0-9a-f]/, (m) => (m.endsWith("0") ? `${m.slice(0, -1)}1` : `${m.slice(0, -1)}0`)),
    path.replace(/expires=(\d+)/, (_m, n) => `expires=${Number(n) + 3600}`),
    path.replace("/output/ws-a/", "/output/ws-b/"),
  ];
  for (const p of tampered) assert.equal((await app.inject({ method: "GET", url: p })).statusCode, 404, p);

  advance(600_000);
  const gone = await app.inject({ method: "GET", url: path });
  assert.equal(gone.statusCode, 404);
  assert.equal(gone.json().error.code, "not_found");
  assert.equal(await store.sweep(), 1);
  assert.equal(existsSync(join(root, "ws-a", `${rec.id}.data`)), false);
  assert.equal(existsSync(join(root, "ws-a", `${rec.id}.json`)), false);
  assert.deepEqual(await store.ofTask("ws-a", "task-1"), []);
});

test("expires is checked", async (t) => {
  const { store } = setup(t);
  const rec = await save(store, "ws-a", Buffer.from("x"));
  for (const bad of [0, -1, 1.5, 8 * 24 * 3600]) {
    await assert.rejects(store.publicUrl("ws-a", rec.id, bad), /expires must be a whole number of seconds/);
  }
});
