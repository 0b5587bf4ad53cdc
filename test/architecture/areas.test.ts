// Each coordinator area that serves routes is a module built by one factory
// (docs/architecture.md, "Areas as modules"): its area.ts holds the factory
// and the builder of its routes, its index.ts exports them, and the edge's
// app mounts only what the areas hand it (it imports no area's routes).

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

const COORDINATOR = resolve(dirname(fileURLToPath(import.meta.url)), "../../coordinator");

/** Folders whose routes are not an area's own: the shared machinery, and the edge and its page. */
const NOT_AREAS = new Set(["http", "edge", "dashboard"]);
/** What edge/app.ts may import from other areas: the machinery, the token store, the page, the endpoint host rewrite. */
const EDGE_APP_MAY_IMPORT = new Set(["http", "store", "dashboard", "endpoints"]);

interface AreaFolder {
  name: string;
  files: string[];
  /** The text of area.ts and index.ts, when they exist. */
  areaTs?: string;
  indexTs?: string;
}

function readAreas(root = COORDINATOR): AreaFolder[] {
  return readdirSync(root, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => {
      const dir = join(root, d.name);
      const read = (f: string) => (existsSync(join(dir, f)) ? readFileSync(join(dir, f), "utf8") : undefined);
      const areaTs = read("area.ts");
      const indexTs = read("index.ts");
      return {
        name: d.name,
        files: readdirSync(dir),
        ...(areaTs !== undefined ? { areaTs } : {}),
        ...(indexTs !== undefined ? { indexTs } : {}),
      };
    });
}

/** What is wrong with the areas: an area with routes and no factory, or one its index does not export. */
export function areaBreaches(areas: AreaFolder[]): string[] {
  const out: string[] = [];
  for (const a of areas) {
    if (NOT_AREAS.has(a.name)) continue;
    const hasRoutes = a.files.some((f) => /routes?\.ts$/.test(f));
    if (!hasRoutes) continue;
    if (a.areaTs === undefined) {
      out.push(`${a.name}: serves routes but has no area.ts`);
      continue;
    }
    if (!/export function \w+HttpRoutes\(/.test(a.areaTs))
      out.push(`${a.name}: area.ts builds no <area>HttpRoutes`);
    if (!/from "\.\/area\.ts"/.test(a.indexTs ?? ""))
      out.push(`${a.name}: index.ts does not export its area.ts`);
  }
  return out;
}

/** Areas edge/app.ts imports besides those it may. */
export function edgeAppBreaches(source: string): string[] {
  const out: string[] = [];
  for (const m of source.matchAll(/from "\.\.\/([^/"]+)\//g)) {
    const area = m[1] ?? "";
    if (!EDGE_APP_MAY_IMPORT.has(area)) out.push(`edge/app.ts imports ${area}`);
  }
  return out;
}

describe("coordinator areas are modules with one factory", () => {
  test("every area that serves routes builds them in its area.ts, exported by its index", () => {
    assert.deepEqual(areaBreaches(readAreas()), []);
  });

  test("the edge's app mounts the areas' routes without importing them", () => {
    assert.deepEqual(edgeAppBreaches(readFileSync(join(COORDINATOR, "edge/app.ts"), "utf8")), []);
  });

  test("the main wiring builds each factory-made area on the lifecycle stack", () => {
    const main = readFileSync(join(COORDINATOR, "main.ts"), "utf8");
    const built = [...main.matchAll(/area\("[^"]+", \(\) =>\s*(?:\{[\s\S]*?)?(create\w+)\(/g)].map((m) => m[1]);
    const factories = readAreas()
      .flatMap((a) => [...(a.areaTs ?? "").matchAll(/export function (create\w+)\(/g)].map((m) => m[1]))
      .filter((f) => f !== undefined);
    assert.ok(factories.length >= 20, `only ${factories.length} factories`);
    for (const f of factories) assert.ok(built.includes(f), `${f} is not built through life.area in main.ts`);
  });

  test("planted breaches are found", () => {
    const folder = (name: string, files: string[], areaTs?: string, indexTs?: string): AreaFolder => ({
      name,
      files,
      ...(areaTs !== undefined ? { areaTs } : {}),
      ...(indexTs !== undefined ? { indexTs } : {}),
    });
    assert.deepEqual(areaBreaches([folder("widgets", ["routes.ts", "service.ts", "index.ts"])]), [
      "widgets: serves routes but has no area.ts",
    ]);
    assert.deepEqual(
      areaBreaches([folder("widgets", ["routes.ts", "area.ts"], "export function createWidgets() {}", "")]),
      ["widgets: area.ts builds no <area>HttpRoutes", "widgets: index.ts does not export its area.ts"],
    );
    assert.deepEqual(areaBreaches([folder("http", ["raw-routes.ts"])]), []);
    assert.deepEqual(edgeAppBreaches('import { secretRoutes } from "../secrets/index.ts";'), [
      "edge/app.ts imports secrets",
    ]);
  });
});
