// Files in a sandbox (docs/sandboxes.md): a pass-through to the agent's
// ContainerFilesApi. Uploads and downloads stream; neither is held whole in
// memory. The download answers bytes, so its failures keep their HTTP status.

import { Readable } from "node:stream";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import type { SandboxService } from "./service.ts";
import { principalOf } from "../http/index.ts";
import { GatewayFailure, gatewayResponse } from "../http/index.ts";
import {
  FileInfoBody,
  SANDBOXES,
  SandboxParams,
  bodyChunks,
  fileJson,
  installRawErrors,
  passBodyThrough,
} from "./routes-common.ts";

const ws = (req: FastifyRequest) => principalOf(req).workspace.id;
const PathQuery = Type.Object({ path: Type.String({ minLength: 1, maxLength: 4096 }) });
const PathBody = Type.Object(
  { path: Type.String({ minLength: 1, maxLength: 4096 }) },
  { additionalProperties: false },
);
const Ok = <T extends Parameters<typeof Type.Object>[0]>(props: T) =>
  gatewayResponse(Type.Object({ ok: Type.Literal(true), ...props }));
const Deleted = Ok({ deleted: Type.Literal(true) });

export function gatewaySandboxFileRoutes(sandboxes: SandboxService): FastifyPluginAsync {
  return async (app) => {
    await app.register(async (json) => {
      passBodyThrough(json);
      const params = (req: FastifyRequest) => (req.params as { id: string }).id;
      const path = (req: FastifyRequest) => (req.query as { path: string }).path;

      json.get(
        `${SANDBOXES}/:id/files/stat`,
        {
          config: { access: { needs: "read" } },
          schema: {
            summary: "A path's file info in a sandbox: size, type, mode, owner, modification time",
            params: SandboxParams,
            querystring: PathQuery,
            response: Ok({ file: FileInfoBody }),
          },
        },
        async (req) => ({
          ok: true as const,
          file: fileJson(
            await sandboxes.withFiles(ws(req), params(req), (api, c) => api.statPath(c, path(req))),
          ),
        }),
      );

      json.get(
        `${SANDBOXES}/:id/files/list`,
        {
          config: { access: { needs: "read" } },
          schema: {
            summary: "A directory's entries in a sandbox (not recursive), sorted by name",
            params: SandboxParams,
            querystring: PathQuery,
            response: Ok({ files: Type.Array(FileInfoBody) }),
          },
        },
        async (req) => ({
          ok: true as const,
          files: (await sandboxes.withFiles(ws(req), params(req), (api, c) => api.listDir(c, path(req)))).map(
            fileJson,
          ),
        }),
      );

      json.put(
        `${SANDBOXES}/:id/files/content`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary: "Uploads the raw body (streamed) as a file in a sandbox, its parent directories created",
            params: SandboxParams,
            querystring: Type.Object({
              path: Type.String({ minLength: 1, maxLength: 4096 }),
              mode: Type.Optional(
                Type.String({ pattern: "^0?[0-7]{3,4}$", description: "octal, e.g. 644 or 0755" }),
              ),
            }),
            response: Ok({ file: FileInfoBody }),
          },
        },
        async (req) => {
          const q = req.query as { path: string; mode?: string };
          const mode = q.mode === undefined ? undefined : Number.parseInt(q.mode, 8);
          const file = await sandboxes.withFiles(ws(req), params(req), (api, c) =>
            api.writeFile(c, q.path, bodyChunks(req.body), mode === undefined ? {} : { mode }),
          );
          return { ok: true as const, file: fileJson(file) };
        },
      );

      json.delete(
        `${SANDBOXES}/:id/files`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary: "Deletes a file or symlink in a sandbox (never a directory)",
            params: SandboxParams,
            querystring: PathQuery,
            response: Deleted,
          },
        },
        async (req) => {
          await sandboxes.withFiles(ws(req), params(req), (api, c) => api.deleteFile(c, path(req)));
          return { ok: true as const, deleted: true as const };
        },
      );

      json.post(
        `${SANDBOXES}/:id/directories`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary: "Creates a directory in a sandbox with its parents (mkdir -p)",
            params: SandboxParams,
            body: PathBody,
            response: Ok({ file: FileInfoBody }),
          },
        },
        async (req) => {
          const { path: p } = req.body as { path: string };
          const file = await sandboxes.withFiles(ws(req), params(req), (api, c) => api.createDirectory(c, p));
          return { ok: true as const, file: fileJson(file) };
        },
      );

      json.delete(
        `${SANDBOXES}/:id/directories`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary: "Deletes a directory of a sandbox and everything under it",
            params: SandboxParams,
            querystring: PathQuery,
            response: Deleted,
          },
        },
        async (req) => {
          await sandboxes.withFiles(ws(req), params(req), (api, c) => api.deleteDirectory(c, path(req)));
          return { ok: true as const, deleted: true as const };
        },
      );

      const Position = Type.Object({ line: Type.Integer(), column: Type.Integer() });
      json.post(
        `${SANDBOXES}/:id/files/find`,
        {
          config: { access: { needs: "read" } },
          schema: {
            summary:
              "Lines matching a regular expression in a file of a sandbox or the files under a directory",
            params: SandboxParams,
            body: Type.Object(
              {
                path: Type.String({ minLength: 1, maxLength: 4096 }),
                pattern: Type.String({ minLength: 1, maxLength: 4096 }),
              },
              { additionalProperties: false },
            ),
            response: Ok({
              matches: Type.Array(
                Type.Object({
                  path: Type.String(),
                  line: Type.String(),
                  range: Type.Object({ start: Position, end: Position }),
                }),
              ),
            }),
          },
        },
        async (req) => {
          const b = req.body as { path: string; pattern: string };
          const matches = await sandboxes.withFiles(ws(req), params(req), (api, c) =>
            api.findInFiles(c, b.path, b.pattern),
          );
          return { ok: true as const, matches };
        },
      );

      json.post(
        `${SANDBOXES}/:id/files/replace`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary:
              "Replaces every occurrence of a string in a file of a sandbox or the files under a directory; answers the counts",
            params: SandboxParams,
            body: Type.Object(
              {
                path: Type.String({ minLength: 1, maxLength: 4096 }),
                old_string: Type.String({ minLength: 1 }),
                new_string: Type.String(),
              },
              { additionalProperties: false },
            ),
            response: Ok({
              files: Type.Array(Type.Object({ path: Type.String(), replacements: Type.Integer() })),
            }),
          },
        },
        async (req) => {
          const b = req.body as { path: string; old_string: string; new_string: string };
          const files = await sandboxes.withFiles(ws(req), params(req), (api, c) =>
            api.replaceInFiles(c, b.path, b.old_string, b.new_string),
          );
          return { ok: true as const, files };
        },
      );
    });

    await app.register(async (raw) => {
      installRawErrors(raw);

      raw.get(
        `${SANDBOXES}/:id/files/content`,
        {
          config: { access: { needs: "read" } },
          schema: {
            summary: "Downloads a file of a sandbox as raw bytes (streamed)",
            params: SandboxParams,
            querystring: PathQuery,
            response: { "4xx": GatewayFailure, "5xx": GatewayFailure },
          },
        },
        async (req, reply) => {
          const { id } = req.params as { id: string };
          const { path } = req.query as { path: string };
          const gone = new AbortController();
          reply.raw.once("close", () => gone.abort());
          // The first chunk is read before answering, so a missing path is still a JSON error with its status.
          const { it, first } = await sandboxes.withFiles(ws(req), id, async (api, c) => {
            const it = api.readFile(c, path, { signal: gone.signal })[Symbol.asyncIterator]();
            return { it, first: await it.next() };
          });
          async function* rest(): AsyncGenerator<Uint8Array> {
            if (first.done) return;
            yield first.value;
            for (let n = await it.next(); !n.done; n = await it.next()) yield n.value;
          }
          return reply.type("application/octet-stream").send(Readable.from(rest()));
        },
      );
    });
  };
}
