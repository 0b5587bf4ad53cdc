// `npm run build`: bundles the CLI (with the coordinator and the agent it
// starts: `berth coordinator`, `berth agent`, `berth up`) from TypeScript to
// JavaScript in dist/cli/, so `berth` starts without compiling anything
// (tsx costs about 1.5 s per start). Also run by `npm pack` (prepack).
//
// - npm packages stay outside the bundle (`packages: "external"`) and load
//   from node_modules as usual: native addons (better-sqlite3, node-pty) and
//   packages that find files next to themselves keep working, and the npm
//   package's dependencies are what it installs anyway.
// - Code splitting: a command's heavy modules (the coordinator, the agent,
//   the gRPC client, ws) are dynamic imports in its action, so they become
//   chunks of their own that `berth --help` never loads.
// - Every output file lands directly in dist/cli/, two levels below the
//   package root, as cli/<dir>/*.ts, agent/<dir>/*.ts and api/grpc/*.ts are:
//   their `new URL("../../sdk/python", import.meta.url)` (and proto/) resolve
//   to the same package files from the bundle. cli/up/child.ts finds the
//   entry, berth.js, beside whatever chunk it lands in.
//
// Usage: node --import tsx scripts/build.ts [--outdir DIR]

import { chmodSync, readFileSync, rmSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build, type Metafile } from "esbuild";

export const ROOT = resolve(fileURLToPath(new URL("..", import.meta.url)));
export const DEFAULT_OUTDIR = join(ROOT, "dist", "cli");
/** The file `berth` runs: package.json "bin". */
export const ENTRY_NAME = "berth.js";

/** Packages bundled in: the ones `berth --help` loads (test/cli/bundle.test.ts checks the help path). */
export const BUNDLED_PACKAGES = ["commander", "ignore"];

/** Every dependency of package.json but BUNDLED_PACKAGES (and their subpaths), for esbuild's `external`. */
function externalPackages(): string[] {
  const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
    dependencies?: Record<string, string>;
    devDependencies?: Record<string, string>;
    optionalDependencies?: Record<string, string>;
  };
  const names = Object.keys({ ...pkg.dependencies, ...pkg.devDependencies, ...pkg.optionalDependencies });
  return names.filter((n) => !BUNDLED_PACKAGES.includes(n)).flatMap((n) => [n, `${n}/*`]);
}

/** Bundles the CLI into `outdir` (emptied first); returns esbuild's metafile (what went where). */
export async function buildCli(outdir = DEFAULT_OUTDIR): Promise<Metafile> {
  rmSync(outdir, { recursive: true, force: true });
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: { berth: join(ROOT, "cli", "bundle-entry.ts") },
    outdir,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    // Every npm package stays outside, but the two the help path loads: commander and ignore are small,
    // pure JavaScript and CommonJS, and bundled they cost no package lookup or CommonJS export scan at start.
    external: externalPackages(),
    banner: {
      js: 'import { createRequire as __berthCreateRequire } from "node:module";\nconst require = __berthCreateRequire(import.meta.url);',
    },
    chunkNames: "chunk-[hash]",
    sourcemap: "linked",
    metafile: true,
    logLevel: "warning",
  });
  chmodSync(join(outdir, ENTRY_NAME), 0o755);
  return result.metafile;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { outdir: { type: "string" } } });
  const outdir = values.outdir ? resolve(values.outdir) : DEFAULT_OUTDIR;
  const meta = await buildCli(outdir);
  const bytes = Object.values(meta.outputs).reduce((n, o) => n + o.bytes, 0);
  process.stdout.write(
    `built ${join(outdir, ENTRY_NAME)} (${Object.keys(meta.outputs).length} files, ${(bytes / 1024).toFixed(0)} KiB)\n`,
  );
}
