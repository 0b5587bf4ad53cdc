// `/api/v1/volume/{ws}...` (docs/volumes.md): the workspace's volumes and
// their files. Uploads and downloads stream (application/octet-stream);
// nothing is buffered whole. Another workspace's `{ws}` is not found, and a
// volume is only ever looked up under the caller's workspace directory.

import type { Readable } from "node:stream";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import { checkVolumeName } from "../../shared/volumes.ts";
import type { VolumeFiles } from "./volume-files.ts";
import { WorkspaceErrors, scopedWorkspace } from "../http/index.ts";

export interface VolumeRouteDeps {
  files: VolumeFiles;
  /** Bytes the workspace's volumes may hold (null: no limit): the limits route's max_volume_mb. */
  maxVolumeBytes?(workspaceId: string): Promise<number | null>;
}

const VolumeBody = Type.Object({
  name: Type.String(),
  size_bytes: Type.Integer(),
  created_at: Type.String(),
});
const EntryBody = Type.Object({
  name: Type.String(),
  path: Type.String(),
  is_dir: Type.Boolean(),
  size: Type.Integer(),
  mod_time: Type.String(),
});
const WsParams = Type.Object({ ws: Type.String() });
const VolParams = Type.Object({ ws: Type.String(), name: Type.String() });
const FileParams = Type.Object({ ws: Type.String(), name: Type.String(), "*": Type.String() });

/** Largest single upload: one file of a model's weights fits. */
export const MAX_VOLUME_UPLOAD_BYTES = 64 * 1024 * 1024 * 1024;

export function volumeRoutes(d: VolumeRouteDeps): FastifyPluginAsync {
  return async (app) => {
    // Uploads go to disk as they arrive.
    app.addContentTypeParser("application/octet-stream", (_req, payload, done) => done(null, payload));

    app.get(
      "/api/v1/volume/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["volumes"],
          summary: "The workspace's volumes with their sizes",
          params: WsParams,
          response: { 200: Type.Object({ volumes: Type.Array(VolumeBody) }), ...WorkspaceErrors },
        },
      },
      async (req) => ({ volumes: await d.files.list(scopedWorkspace(req).id) }),
    );

    app.post(
      "/api/v1/volume/:ws",
      {
        config: { access: { needs: "write", audit: "volume.create" } },
        schema: {
          tags: ["volumes"],
          summary: "Create a volume (volumes are also created on first use)",
          params: WsParams,
          body: Type.Object({ name: Type.String() }, { additionalProperties: false }),
          response: { 200: VolumeBody, ...WorkspaceErrors, 409: WorkspaceErrors[404] },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const { name } = req.body as { name: string };
        return d.files.create(ws.id, checkVolumeName(name));
      },
    );

    app.get(
      "/api/v1/volume/:ws/:name",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["volumes"],
          summary: "One volume",
          params: VolParams,
          response: { 200: VolumeBody, ...WorkspaceErrors },
        },
      },
      async (req) => {
        const { name } = req.params as { name: string };
        return d.files.get(scopedWorkspace(req).id, name);
      },
    );

    app.delete(
      "/api/v1/volume/:ws/:name",
      {
        config: { access: { needs: "write", audit: "volume.delete" } },
        schema: {
          tags: ["volumes"],
          summary: "Delete a volume and every file in it",
          params: VolParams,
          response: { 200: Type.Object({ deleted: Type.Boolean() }), ...WorkspaceErrors },
        },
      },
      async (req) => {
        const { name } = req.params as { name: string };
        await d.files.remove(scopedWorkspace(req).id, name);
        return { deleted: true };
      },
    );

    app.get(
      "/api/v1/volume/:ws/:name/ls",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["volumes"],
          summary: "The entries of a directory of the volume (default its root)",
          params: VolParams,
          querystring: Type.Object({ path: Type.Optional(Type.String()) }),
          response: { 200: Type.Object({ entries: Type.Array(EntryBody) }), ...WorkspaceErrors },
        },
      },
      async (req) => {
        const { name } = req.params as { name: string };
        const { path } = req.query as { path?: string };
        return { entries: await d.files.ls(scopedWorkspace(req).id, name, path ?? "/") };
      },
    );

    app.get(
      "/api/v1/volume/:ws/:name/files/*",
      {
        config: { access: { needs: "read" } },
        schema: {
          tags: ["volumes"],
          summary: "Download a file of the volume (streamed)",
          params: FileParams,
        },
      },
      async (req, reply) => {
        const p = req.params as { name: string; "*": string };
        const { size, stream } = await d.files.read(scopedWorkspace(req).id, p.name, p["*"]);
        reply.header("content-type", "application/octet-stream").header("content-length", size);
        return reply.send(stream);
      },
    );

    app.put(
      "/api/v1/volume/:ws/:name/files/*",
      {
        config: { access: { needs: "write" } },
        bodyLimit: MAX_VOLUME_UPLOAD_BYTES,
        schema: {
          tags: ["volumes"],
          summary:
            "Upload a file into the volume (streamed; parent directories made; the volume made on first use)",
          params: FileParams,
          response: { 200: EntryBody, ...WorkspaceErrors },
        },
      },
      async (req) => {
        const ws = scopedWorkspace(req);
        const p = req.params as { name: string; "*": string };
        const body = req.body as Readable | undefined;
        if (!body || typeof body.pipe !== "function") {
          throw new BerthError(
            "invalid_request",
            "send the file's bytes with Content-Type: application/octet-stream",
          );
        }
        const max = (await d.maxVolumeBytes?.(ws.id)) ?? null;
        let room = Number.POSITIVE_INFINITY;
        if (max !== null) {
          room = max - (await d.files.workspaceBytes(ws.id));
          const length = Number(req.headers["content-length"] ?? 0);
          if (room <= 0 || length > room) {
            body.resume();
            throw new BerthError(
              "limit_exceeded",
              `the workspace's volumes hold ${max - room} bytes and its limit max_volume_mb allows ${max}: this upload of ${length} bytes does not fit`,
              { limit: "max_volume_mb", max_volume_bytes: max },
            );
          }
        }
        return d.files.write(ws.id, p.name, p["*"], body, room);
      },
    );
  };
}
