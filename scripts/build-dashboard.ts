// `npm run build` (second step): bundles the web dashboard (dashboard/,
// preact + htm) with esbuild into dist/dashboard/, which the coordinator
// serves at `/` (coordinator/dashboard/). Asset names carry a content hash,
// so the coordinator may let browsers keep them for a year; index.html
// (written here, naming them) is never cached. Nothing is fetched from a CDN
// at run time: preact is in the bundle.
//
// Usage: node --import tsx scripts/build-dashboard.ts [--outdir DIR]

import { mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";

export const ROOT = resolve(fileURLToPath(new URL("..", import.meta.url)));
export const DASHBOARD_SRC = join(ROOT, "dashboard");
export const DEFAULT_DASHBOARD_OUTDIR = join(ROOT, "dist", "dashboard");

/** The newest modification time (ms) of the dashboard's sources: a build older than this is stale. */
export function newestSourceMtime(dir = DASHBOARD_SRC): number {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestSourceMtime(p) : statSync(p).mtimeMs);
  }
  return newest;
}

const indexHtml = (script: string, style: string) => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>berth</title>
<link rel="stylesheet" href="/assets/${style}">
</head>
<body>
<div id="app"></div>
<script type="module" src="/assets/${script}"></script>
</body>
</html>
`;

/** Bundles the dashboard into `outdir` (emptied first): index.html and assets/ (hashed names). */
export async function buildDashboard(outdir = DEFAULT_DASHBOARD_OUTDIR): Promise<string[]> {
  rmSync(outdir, { recursive: true, force: true });
  const assets = join(outdir, "assets");
  mkdirSync(assets, { recursive: true });
  const result = await build({
    absWorkingDir: ROOT,
    entryPoints: { app: join(DASHBOARD_SRC, "main.ts"), style: join(DASHBOARD_SRC, "style.css") },
    outdir: assets,
    entryNames: "[name]-[hash]",
    bundle: true,
    format: "esm",
    platform: "browser",
    target: ["chrome110", "firefox110", "safari16"],
    minify: true,
    sourcemap: "linked",
    metafile: true,
    logLevel: "warning",
  });
  const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
  const script = outputs.find((n) => n.startsWith("app-") && n.endsWith(".js"));
  const style = outputs.find((n) => n.startsWith("style-") && n.endsWith(".css"));
  if (!script || !style) throw new Error(`esbuild wrote no app script or stylesheet: ${outputs.join(", ")}`);
  writeFileSync(join(outdir, "index.html"), indexHtml(script, style));
  return ["index.html", ...outputs.map((n) => relative(outdir, join(assets, n)))];
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { outdir: { type: "string" } } });
  const outdir = values.outdir ? resolve(values.outdir) : DEFAULT_DASHBOARD_OUTDIR;
  const files = await buildDashboard(outdir);
  process.stdout.write(`built the dashboard in ${outdir} (${files.join(", ")})\n`);
}
