// The web dashboard's files (docs/dashboard.md): `GET /` answers
// dist/dashboard/index.html and `GET /assets/{file}` the bundle
// `npm run build` wrote there (scripts/build-dashboard.ts). The page calls
// the token-scoped REST API itself, so these routes are public and serve
// only files: no data, no token. Files are read per request, so a rebuild
// shows without a restart.

import { readFile } from "node:fs/promises";
import { extname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyReply } from "fastify";
import { notFound } from "../../shared/errors.ts";

/**
 * Where `npm run build` writes the dashboard: <package root>/dist/dashboard.
 * Two levels up from this file in the source tree (coordinator/dashboard/)
 * and from the CLI bundle's files (dist/cli/) alike.
 */
export const DEFAULT_DASHBOARD_DIR = fileURLToPath(new URL("../../dist/dashboard", import.meta.url));

/** The asset types the build writes; any other name is 404. */
const CONTENT_TYPES: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".woff2": "font/woff2",
};

/** One path segment of dot-separated words: no slash, no `..`, no leading dot. */
const ASSET_NAME = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$";

/** The page's own scripts and styles only; the API is same-origin. */
const PAGE_HEADERS = {
  "content-security-policy":
    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
};

const notBuiltPage = (dir: string) => `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>berth: dashboard not built</title></head>
<body style="font-family: system-ui, sans-serif; max-width: 40rem; margin: 3rem auto">
<h1>The berth dashboard is not built</h1>
<p>This coordinator serves the dashboard from <code>${escapeHtml(dir)}</code>, which holds no
<code>index.html</code>. Run <code>npm run build</code> in the berth checkout, then reload this page.</p>
<p>The REST API (<code>/api/v1/...</code>) works without it.</p>
</body></html>
`;

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

const isMissing = (e: unknown) =>
  ["ENOENT", "ENOTDIR", "EISDIR"].includes((e as NodeJS.ErrnoException).code ?? "");

export interface DashboardOptions {
  /** The built dashboard. @default DEFAULT_DASHBOARD_DIR */
  dir?: string;
}

export function dashboardRoutes(opts: DashboardOptions = {}): FastifyPluginAsync {
  const dir = resolve(opts.dir ?? DEFAULT_DASHBOARD_DIR);
  const assets = join(dir, "assets");
  return async (app) => {
    app.get(
      "/",
      {
        schema: {
          hide: true,
          response: { 200: Type.String({ description: "the dashboard page (text/html)" }) },
        },
      },
      async (_req, reply: FastifyReply) => {
        reply.headers(PAGE_HEADERS).header("cache-control", "no-cache").type("text/html; charset=utf-8");
        try {
          return await readFile(join(dir, "index.html"), "utf8");
        } catch (e) {
          if (!isMissing(e)) throw e;
          return reply.status(503).send(notBuiltPage(dir));
        }
      },
    );

    app.get(
      "/assets/:file",
      {
        schema: {
          hide: true,
          params: Type.Object({ file: Type.String({ pattern: ASSET_NAME, maxLength: 128 }) }),
        },
      },
      async (req, reply: FastifyReply) => {
        const { file } = req.params as { file: string };
        const type = CONTENT_TYPES[extname(file)];
        const path = resolve(assets, file);
        // The pattern already keeps the name to one segment; this is the check that must never fail open.
        if (!type || !path.startsWith(assets + sep)) throw notFound(`dashboard file ${file}`);
        let body: Buffer;
        try {
          body = await readFile(path);
        } catch (e) {
          if (isMissing(e)) throw notFound(`dashboard file ${file}`);
          throw e;
        }
        // Names carry their content's hash (scripts/build-dashboard.ts): a name never changes content.
        return reply
          .headers({
            "x-content-type-options": "nosniff",
            "cache-control": "public, max-age=31536000, immutable",
          })
          .type(type)
          .send(body);
      },
    );
  };
}
