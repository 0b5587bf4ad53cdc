// The bundled CLI (scripts/build.ts, `npm run build`): it is built from the
// same sources, says the same as the sources do, and its help path loads no
// server-side package (what keeps `berth --help` fast: bench/cli measures it).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import type { Metafile } from "esbuild";
import { BUNDLED_PACKAGES, buildCli, ENTRY_NAME, ROOT } from "../../scripts/build.ts";
import { CLI_MAIN } from "../helpers/cluster.ts";

const run = promisify(execFile);

/** Packages only a command's action may load (dynamic imports), never the help path. */
const HEAVY = [
  "fastify",
  "nats",
  "@grpc/grpc-js",
  "@grpc/proto-loader",
  "ws",
  "pino",
  "better-sqlite3",
  "node-pty",
  "kysely",
  "pg",
  "node-forge",
  "prom-client",
];

/** Every output file and package the entry loads before it runs: its static imports, transitively. */
function staticClosure(meta: Metafile, outdir: string): { files: string[]; packages: Set<string> } {
  const rel = (p: string) => p.replace(/^.*?dist-test-[^/]+\//, "");
  const byName = new Map(Object.entries(meta.outputs).map(([path, o]) => [rel(path), o]));
  const files: string[] = [];
  const packages = new Set<string>();
  const queue = [ENTRY_NAME];
  while (queue.length > 0) {
    const name = queue.shift()!;
    if (files.includes(name)) continue;
    files.push(name);
    const out = byName.get(name);
    assert.ok(out, `${name} is in the metafile (outdir ${outdir})`);
    for (const imp of out.imports) {
      if (imp.kind !== "import-statement") continue;
      if (imp.external) {
        if (!imp.path.startsWith("node:")) packages.add(imp.path);
      } else queue.push(rel(imp.path));
    }
  }
  return { files, packages };
}

test("the bundle answers like the sources, and its help path loads no server-side package", async (t) => {
  // Two levels below the repository, like dist/cli: the bundle finds sdk/python, proto/ and node_modules from there.
  const outdir = join(ROOT, ".cache", `dist-test-${process.pid}`);
  mkdirSync(join(ROOT, ".cache"), { recursive: true });
  t.after(() => rmSync(outdir, { recursive: true, force: true }));
  const meta = await buildCli(outdir);
  const entry = join(outdir, ENTRY_NAME);

  const { files, packages } = staticClosure(meta, outdir);
  for (const p of HEAVY) assert.ok(!packages.has(p), `the entry statically loads ${p} (${[...packages]})`);
  // Nor any other package: what the help path needs is bundled in (BUNDLED_PACKAGES); anything else is
  // an import for an action to make (`await import()`), or small enough to join BUNDLED_PACKAGES.
  assert.deepEqual(
    [...packages],
    [],
    "packages the help path loads from node_modules: make each an `await import()` in its command's action " +
      "(or, when small and pure JavaScript, add it to BUNDLED_PACKAGES in scripts/build.ts)",
  );
  // Whatever any chunk loads from node_modules is a dependency of the package: `npm install -g` leaves
  // devDependencies out, and a chunk that imports one fails on every installed host.
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
    dependencies: Record<string, string>;
    optionalDependencies?: Record<string, string>;
  };
  const runtime = new Set(Object.keys({ ...pkg.dependencies, ...pkg.optionalDependencies }));
  const packageOf = (spec: string) =>
    spec
      .split("/")
      .slice(0, spec.startsWith("@") ? 2 : 1)
      .join("/");
  const imported = new Set(
    Object.values(meta.outputs).flatMap((o) =>
      o.imports.filter((i) => i.external && !i.path.startsWith("node:")).map((i) => packageOf(i.path)),
    ),
  );
  assert.deepEqual(
    [...imported].filter((p) => !runtime.has(p)),
    [],
    "packages the bundle imports that are not in package.json dependencies",
  );
  const bundled = Object.keys(meta.inputs).filter((i) => i.includes("node_modules/"));
  for (const p of BUNDLED_PACKAGES)
    assert.ok(
      bundled.some((i) => i.includes(`node_modules/${p}/`)),
      p,
    );
  // The heavy parts are there, as chunks loaded on demand.
  const all = new Set(Object.values(meta.outputs).flatMap((o) => o.imports.map((i) => i.path)));
  for (const p of ["fastify", "nats", "@grpc/grpc-js", "ws"]) assert.ok(all.has(p), `${p} is in some chunk`);
  assert.ok(files.length < Object.keys(meta.outputs).filter((f) => f.endsWith(".js")).length);

  for (const args of [["--help"], ["agent", "--help"], ["--version"]]) {
    const bundled = await run(process.execPath, [entry, ...args]);
    const sources = await run(process.execPath, ["--import", "tsx", CLI_MAIN, ...args]);
    assert.equal(bundled.stdout, sources.stdout, `berth ${args.join(" ")}`);
  }
  const help = await run(process.execPath, [entry, "--help"]);
  for (const cmd of ["up", "coordinator", "agent", "deploy", "deployment"])
    assert.match(help.stdout, new RegExp(`\\n  ${cmd} `));

  // A command that fails in the bundle says why, once, and exits 1 (the entry runs main() exactly once).
  const bad = await run(process.execPath, [
    entry,
    "agent",
    "ps",
    "--socket",
    join(outdir, "none.sock"),
  ]).catch((e: { code: number; stdout: string; stderr: string }) => e);
  assert.equal((bad as { code: number }).code, 1);
  const lines = (bad as { stderr: string }).stderr.trim().split("\n");
  assert.equal(lines.length, 1, (bad as { stderr: string }).stderr);
  assert.match(lines[0]!, /^berth: no agent socket at .*none\.sock/);
});
