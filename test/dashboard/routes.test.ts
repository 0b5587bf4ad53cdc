// The dashboard's file routes (coordinator/dashboard/routes.ts) over a
// built directory written by the test: the page and its assets with their
// content types and cache headers, the "run npm run build" page when nothing
// is built, and no way out of the assets directory.

import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { dashboardRoutes } from "../../coordinator/dashboard/routes.ts";
import { tempDir } from "../helpers/env.ts";
import { routesApp } from "../helpers/routes-app.ts";

async function appOver(dir: string) {
  const app = routesApp();
  await app.register(dashboardRoutes({ dir }));
  await app.ready();
  return app;
}

test("without a build, / answers a page saying to run npm run build", async (t) => {
  const dir = join(tempDir(t), "dashboard");
  const app = await appOver(dir);
  t.after(() => app.close());
  const r = await app.inject({ method: "GET", url: "/" });
  assert.equal(r.statusCode, 503);
  assert.match(String(r.headers["content-type"]), /^text\/html/);
  assert.match(r.body, /npm run build/);
  assert.ok(r.body.includes(dir), r.body);
  const asset = await app.inject({ method: "GET", url: "/assets/app-ABC.js" });
  assert.equal(asset.statusCode, 404);
  assert.equal(asset.json().error.code, "not_found");
});

test("a built dashboard: the page uncached, hashed assets cached for good, right types", async (t) => {
  const dir = tempDir(t);
  mkdirSync(join(dir, "assets"));
  writeFileSync(join(dir, "index.html"), "<!doctype html><div id=app></div>");
  writeFileSync(join(dir, "assets", "app-ABC123.js"), "console.log(1)");
  writeFileSync(join(dir, "assets", "style-XYZ.css"), "body{}");
  writeFileSync(join(dir, "assets", "notes.txt"), "not an asset type");
  writeFileSync(join(dir, "secret.js"), "outside assets/");
  const app = await appOver(dir);
  t.after(() => app.close());

  const page = await app.inject({ method: "GET", url: "/" });
  assert.equal(page.statusCode, 200);
  assert.equal(page.body, "<!doctype html><div id=app></div>");
  assert.equal(page.headers["content-type"], "text/html; charset=utf-8");
  assert.equal(page.headers["cache-control"], "no-cache");
  assert.match(String(page.headers["content-security-policy"]), /default-src 'self'/);

  const js = await app.inject({ method: "GET", url: "/assets/app-ABC123.js" });
  assert.equal(js.statusCode, 200);
  assert.equal(js.body, "console.log(1)");
  assert.equal(js.headers["content-type"], "text/javascript; charset=utf-8");
  assert.equal(js.headers["cache-control"], "public, max-age=31536000, immutable");
  assert.equal(js.headers["x-content-type-options"], "nosniff");
  const css = await app.inject({ method: "GET", url: "/assets/style-XYZ.css" });
  assert.equal(css.headers["content-type"], "text/css; charset=utf-8");

  // Not a type the build writes, not there, or not one plain name: never a file from elsewhere.
  for (const url of [
    "/assets/notes.txt",
    "/assets/missing-1.js",
    "/assets/..%2fsecret.js",
    "/assets/%2e%2e%2fsecret.js",
    "/assets/.hidden.js",
    "/assets/../secret.js",
    "/assets/a%00.js",
  ]) {
    const r = await app.inject({ method: "GET", url });
    assert.ok([400, 404].includes(r.statusCode), `${url}: ${r.statusCode} ${r.body}`);
    assert.ok(!r.body.includes("outside assets/"), url);
    assert.ok(r.json().error.code, `${url}: ${r.body}`);
  }
});
