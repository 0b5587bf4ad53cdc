// `/api/v1/volume/{ws}...` over a listening server with a real SQLite store
// and a real volume root on disk: create, list, upload (streamed), list a
// path, download, delete; paths that escape (`..`, symlinks) refused;
// another workspace's volume is 404; the max_volume_bytes limit refuses an
// upload that does not fit.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import type { FastifyInstance } from "fastify";
import { volumeRoutes } from "../../coordinator/volumes/routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { Store } from "../../coordinator/records.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import { VolumeFiles } from "../../coordinator/volumes/volume-files.ts";
import { bearer } from "../helpers/auth.ts";
import { tempDir } from "../helpers/env.ts";
import { routesApp } from "../helpers/routes-app.ts";

describe("volume routes", () => {
  const cleanups: (() => unknown)[] = [];
  const later = { after: (fn: () => unknown) => cleanups.push(fn) };
  let app: FastifyInstance;
  let baseUrl: string;
  let root: string;
  let team: Workspace;
  let other: Workspace;
  let teamToken: string;
  let otherToken: string;
  const maxBytes = new Map<string, number | null>();

  before(async () => {
    const dir = tempDir(later);
    root = join(dir, "volumes");
    const store = await Store.open(`sqlite:${dir}/berth.db`);
    cleanups.push(() => store.close());
    team = await store.workspaces.create("team");
    other = await store.workspaces.create("other");
    teamToken = (await store.tokens.create(team.id, { name: "t" })).secret;
    otherToken = (await store.tokens.create(other.id, { name: "o" })).secret;
    app = routesApp();
    await app.register(
      tokenScope(
        store.tokens,
        volumeRoutes({
          files: new VolumeFiles(root),
          maxVolumeBytes: async (ws) => maxBytes.get(ws) ?? null,
        }),
      ),
    );
    await app.listen({ host: "127.0.0.1", port: 0 });
    cleanups.push(() => app.close());
    const addr = app.server.address();
    baseUrl = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  const call = async (method: string, path: string, token = teamToken, body?: unknown) => {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { ...bearer(token), ...(body !== undefined ? { "content-type": "application/json" } : {}) },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
    // biome-ignore lint/suspicious/noExplicitAny: test answers are read field by field
    return { status: res.status, body: (await res.json()) as any };
  };
  const put = (path: string, bytes: Uint8Array<ArrayBuffer> | string, token = teamToken) =>
    fetch(`${baseUrl}${path}`, {
      method: "PUT",
      headers: { ...bearer(token), "content-type": "application/octet-stream" },
      body: bytes,
    });
  const v = () => `/api/v1/volume/${team.externalId}`;

  test("create, upload, list, download, delete", async () => {
    const created = await call("POST", v(), teamToken, { name: "weights" });
    assert.equal(created.status, 200, JSON.stringify(created.body));
    assert.equal(created.body.name, "weights");
    assert.equal((await call("POST", v(), teamToken, { name: "weights" })).body.error.code, "conflict");

    const big = new Uint8Array(Buffer.alloc(3 * 1024 * 1024 + 7, 0x61));
    const up = await put(`${v()}/weights/files/models/a.bin`, big);
    assert.equal(up.status, 200, await up.clone().text());
    assert.deepEqual(
      { ...((await up.json()) as object), mod_time: undefined },
      { name: "a.bin", path: "/models/a.bin", is_dir: false, size: big.length, mod_time: undefined },
    );
    // On disk under <root>/<workspace id>/<name>, with no temp file left beside it.
    assert.equal(readFileSync(join(root, team.id, "weights", "models", "a.bin")).length, big.length);
    assert.deepEqual(readdirSync(join(root, team.id, "weights", "models")), ["a.bin"]);

    const listed = await call("GET", v());
    assert.deepEqual(
      listed.body.volumes.map((x: { name: string; size_bytes: number }) => [x.name, x.size_bytes]),
      [["weights", big.length]],
    );
    const root1 = await call("GET", `${v()}/weights/ls`);
    assert.deepEqual(
      root1.body.entries.map((e: { path: string; is_dir: boolean }) => [e.path, e.is_dir]),
      [["/models", true]],
    );
    const sub = await call("GET", `${v()}/weights/ls?path=models`);
    assert.deepEqual(
      sub.body.entries.map((e: { path: string; size: number }) => [e.path, e.size]),
      [["/models/a.bin", big.length]],
    );

    const down = await fetch(`${baseUrl}${v()}/weights/files/models/a.bin`, { headers: bearer(teamToken) });
    assert.equal(down.status, 200);
    assert.equal(down.headers.get("content-length"), String(big.length));
    assert.ok(Buffer.from(await down.arrayBuffer()).equals(Buffer.from(big)));

    // A second upload replaces the file whole.
    assert.equal((await put(`${v()}/weights/files/models/a.bin`, "new")).status, 200);
    const again = await fetch(`${baseUrl}${v()}/weights/files/models/a.bin`, { headers: bearer(teamToken) });
    assert.equal(await again.text(), "new");

    assert.equal((await call("DELETE", `${v()}/weights`)).status, 200);
    assert.equal(existsSync(join(root, team.id, "weights")), false);
    assert.equal((await call("GET", `${v()}/weights`)).body.error.code, "not_found");
  });

  test("an upload creates the volume on first use; missing paths and volumes are 404", async () => {
    assert.equal((await put(`${v()}/fresh/files/x.txt`, "x")).status, 200);
    assert.equal((await call("GET", `${v()}/fresh`)).status, 200);
    const missing = await call("GET", `${v()}/fresh/ls?path=nope`);
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error.code, "path_not_found");
    assert.equal((await call("GET", `${v()}/absent/ls`)).status, 404);
  });

  test("names are validated", async () => {
    for (const name of ["../x", "a b", "-a", "x".repeat(64)]) {
      const r = await call("POST", v(), teamToken, { name });
      assert.equal(r.status, 400, name);
      assert.match(r.body.error.message, /volume name .* is not valid/);
    }
  });

  test("paths never leave the volume: '..' and symlinks are refused", async () => {
    assert.equal((await put(`${v()}/safe/files/in.txt`, "in")).status, 200);
    const outside = join(root, "..", "outside");
    mkdirSync(outside, { recursive: true });
    writeFileSync(join(outside, "secret"), "secret");
    // A container could make these links inside the volume.
    symlinkSync(outside, join(root, team.id, "safe", "link-dir"));
    symlinkSync(join(outside, "secret"), join(root, team.id, "safe", "link-file"));
    for (const path of ["link-file", "link-dir/secret"]) {
      const r = await fetch(`${baseUrl}${v()}/safe/files/${path}`, { headers: bearer(teamToken) });
      assert.equal(r.status, 400, path);
      assert.equal(((await r.json()) as { error: { code: string } }).error.code, "path_invalid");
    }
    const ls = await call("GET", `${v()}/safe/ls?path=link-dir`);
    assert.equal(ls.body.error.code, "path_invalid");
    const up = await put(`${v()}/safe/files/link-dir/planted`, "x");
    assert.equal(up.status, 400);
    assert.equal(existsSync(join(outside, "planted")), false);
    const dots = await call("GET", `${v()}/safe/ls?path=${encodeURIComponent("../../")}`);
    assert.equal(dots.status, 400);
    assert.match(dots.body.error.message, /'\.\.' may not appear/);
    const dotsFile = await fetch(`${baseUrl}${v()}/safe/files/a%2F..%2F..%2Fx`, {
      headers: bearer(teamToken),
    });
    assert.equal(dotsFile.status, 400);
  });

  test("another workspace's volumes are not found, and its own list does not show them", async () => {
    assert.equal((await put(`${v()}/private/files/f`, "mine")).status, 200);
    for (const [method, path] of [
      ["GET", `${v()}`],
      ["GET", `${v()}/private`],
      ["GET", `${v()}/private/ls`],
      ["GET", `${v()}/private/files/f`],
      ["DELETE", `${v()}/private`],
    ] as const) {
      assert.equal((await call(method, path, otherToken)).status, 404, `${method} ${path}`);
    }
    assert.equal((await put(`${v()}/private/files/f`, "theirs", otherToken)).status, 404);
    const mine = `/api/v1/volume/${other.externalId}`;
    assert.deepEqual((await call("GET", mine, otherToken)).body.volumes, []);
    // The same name in the other workspace is another volume.
    assert.equal((await call("GET", `${mine}/private`, otherToken)).status, 404);
    assert.equal(readFileSync(join(root, team.id, "private", "f"), "utf8"), "mine");
  });

  test("max_volume_bytes refuses an upload that does not fit", async () => {
    const ws = await call("GET", `/api/v1/volume/${other.externalId}`, otherToken);
    assert.equal(ws.status, 200);
    maxBytes.set(other.id, 10);
    const base = `/api/v1/volume/${other.externalId}`;
    assert.equal((await put(`${base}/q/files/a`, "12345", otherToken)).status, 200);
    const over = await put(`${base}/q/files/b`, "123456", otherToken);
    assert.equal(over.status, 429);
    const body = (await over.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, "limit_exceeded");
    assert.match(body.error.message, /max_volume_mb allows 10/);
    assert.equal(existsSync(join(root, other.id, "q", "b")), false);
    maxBytes.delete(other.id);
  });
});
