import { PassThrough } from "node:stream";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import { BerthError } from "../../shared/errors.ts";
import type { ImageBuilds, ImageBuildUpdate } from "./index.ts";
import type { AgentPull, HandPulls } from "./hand-pull.ts";
import type { BuiltImage } from "./store.ts";
import { publicError } from "../http/index.ts";
import { principalOf } from "../http/index.ts";
import { ErrorResponse } from "../http/index.ts";

// Images the cluster builds (docs/images.md, "Builds through the
// coordinator"): the workspace's list with each image's status, and a build
// that streams its progress as NDJSON.

export const ImageBody = Type.Object({
  image_id: Type.String(),
  status: Type.Union([Type.Literal("building"), Type.Literal("ready"), Type.Literal("failed")]),
  base_image: Type.String(),
  base_digest: Type.String(),
  digest: Type.String(),
  /** What the image is known by on the agent that built it; "" until ready. */
  ref: Type.String(),
  steps: Type.Array(Type.String()),
  error: Type.String(),
  created_at: Type.String({ format: "date-time" }),
  updated_at: Type.String({ format: "date-time" }),
});

export const imageJson = (i: BuiltImage) => ({
  image_id: i.imageId,
  status: i.status,
  base_image: i.baseImage,
  base_digest: i.baseDigest,
  digest: i.digest,
  ref: i.ref,
  steps: i.steps,
  error: i.error,
  created_at: i.createdAt,
  updated_at: i.updatedAt,
});

const errors = { 400: ErrorResponse, 401: ErrorResponse, 403: ErrorResponse, 404: ErrorResponse };
const WsParams = Type.Object({ ws: Type.String() });
const ImageParams = Type.Object({ ws: Type.String(), imageId: Type.String({ minLength: 1 }) });

/** The SDK's Image spec (sdk/python/berth/api/image.py spec()); checked by the build itself. */
const ImageSpecBody = Type.Object({
  python_version: Type.Optional(Type.String()),
  python_packages: Type.Optional(Type.Array(Type.String())),
  commands: Type.Optional(Type.Array(Type.String())),
  base_image: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  base_image_creds: Type.Optional(Type.Array(Type.String())),
  env_vars: Type.Optional(Type.Array(Type.String())),
  build_with_gpu: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  snapshot_id: Type.Optional(Type.Union([Type.String(), Type.Null()])),
  dockerfile: Type.Optional(Type.Unknown()),
  secrets: Type.Optional(Type.Array(Type.String())),
  micromamba: Type.Optional(Type.Boolean()),
  micromamba_packages: Type.Optional(Type.Array(Type.String())),
  micromamba_channels: Type.Optional(Type.Array(Type.String())),
  pool: Type.Optional(Type.Union([Type.String(), Type.Null()])),
});

function workspaceOf(req: FastifyRequest): string {
  const { ws } = req.params as { ws: string };
  const workspace = principalOf(req).workspace;
  if (ws !== workspace.externalId) throw new BerthError("not_found", `workspace ${ws} not found`);
  return workspace.id;
}

/** One NDJSON line of a build's progress. */
export function buildLine(u: ImageBuildUpdate): Record<string, unknown> {
  switch (u.type) {
    case "base":
      return { event: "base", image_id: u.imageId, base_image: u.ref, base_digest: u.digest };
    case "step":
      return { event: "step", step: u.index, total: u.total, name: u.name, cached: u.cached };
    case "output":
      return { event: "output", step: u.index, stream: u.stream, line: u.line };
    case "step_done":
      return { event: "step_done", step: u.index, cached: u.cached, seconds: u.seconds };
    case "done":
      return { event: "built", image_id: u.imageId, cached_steps: u.cachedSteps, built_steps: u.builtSteps };
    case "pull":
    case "push":
      return {
        event: u.type,
        ref: u.ref,
        blobs_done: u.blobsDone,
        blobs_total: u.blobsTotal,
        bytes_done: u.bytesDone,
        bytes_total: u.bytesTotal,
        blobs_skipped: u.blobsSkipped,
      };
    case "image":
      return { event: "image", image: imageJson(u.image), env: u.env };
  }
}

/** One NDJSON line of an agent's outcome in `berth image pull`. */
function pullLine(o: AgentPull, log: FastifyRequest["log"]): Record<string, unknown> {
  const seconds = Math.round(o.ms / 100) / 10;
  if (o.ok)
    return {
      event: "pulled",
      agent_id: o.agentId,
      digest: o.image.digest,
      size_bytes: o.image.sizeBytes,
      seconds,
    };
  const { body } = publicError(o.error, { log, what: "image pull failed" });
  return {
    event: "failed",
    agent_id: o.agentId,
    error: { details: {}, ...(body as { error: object }).error },
    seconds,
  };
}

/** `/api/v1/image/{ws}`: the workspace's built images, builds, and pulls onto a pool. */
export function imageRoutes(builds: ImageBuilds, pulls: HandPulls): FastifyPluginAsync {
  return async (app) => {
    // `berth image pull`: the image onto every ready agent of a pool, each agent's outcome streamed as it ends.
    app.post(
      "/api/v1/image/:ws/pull",
      {
        config: { access: { needs: "write", audit: "image.pull" } },
        schema: {
          summary:
            "Pulls an image onto every ready agent (of a pool); streams each agent's outcome as NDJSON",
          params: WsParams,
          body: Type.Object(
            {
              /** A built image's id (img-...) or an image reference. */
              image: Type.String({ minLength: 1, maxLength: 1024 }),
              /** Only this pool's agents; every ready agent without it. */
              pool: Type.Optional(Type.String({ minLength: 1 })),
            },
            { additionalProperties: false },
          ),
          response: { 422: ErrorResponse, 503: ErrorResponse, ...errors },
        },
      },
      async (req, reply) => {
        const wsId = workspaceOf(req);
        const { image, pool } = req.body as { image: string; pool?: string };
        // Refusals (no such image, no such pool) come before the stream starts, as an ordinary error answer.
        const started = await pulls.start(wsId, image, pool);
        const out = new PassThrough();
        reply.type("application/x-ndjson").send(out);
        const write = (o: Record<string, unknown>) => out.write(`${JSON.stringify(o)}\n`);
        void (async () => {
          let pulled = 0;
          let failed = 0;
          try {
            write({
              event: "pulling",
              image: started.ref,
              agents: started.agents.map((a) => ({ agent_id: a.agentId, pool: a.pool })),
            });
            for await (const o of started.outcomes) {
              if (o.ok) pulled++;
              else failed++;
              write(pullLine(o, req.log));
            }
            write({ event: "done", pulled, failed });
          } finally {
            out.end();
          }
        })();
        return reply;
      },
    );

    app.get(
      "/api/v1/image/:ws",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary: "The workspace's built images with their status, newest first",
          params: WsParams,
          response: { 200: Type.Object({ images: Type.Array(ImageBody) }), ...errors },
        },
      },
      async (req) => ({ images: (await builds.list(workspaceOf(req))).map(imageJson) }),
    );

    // `berth image rm`: 409 conflict while a deployment runs the image (details.deployments) or it builds.
    app.delete(
      "/api/v1/image/:ws/:imageId",
      {
        config: { access: { needs: "write", audit: "image.delete" } },
        schema: {
          summary: "Deletes a built image's record; 409 while a deployment runs it or it builds",
          params: ImageParams,
          response: { 200: Type.Object({ deleted: Type.Boolean() }), 409: ErrorResponse, ...errors },
        },
      },
      async (req) => {
        const wsId = workspaceOf(req);
        await builds.remove(wsId, (req.params as { imageId: string }).imageId);
        return { deleted: true };
      },
    );

    app.post(
      "/api/v1/image/:ws/build",
      {
        config: { access: { needs: "write" } },
        schema: {
          summary: "Builds an image from the SDK's Image spec; streams its progress as NDJSON",
          params: WsParams,
          body: Type.Object(
            {
              image: ImageSpecBody,
              /** base_image_creds as variable → value; used for this build's pull only, never stored. */
              /** from_dockerfile: the Dockerfile's text and its context, uploaded as an object (a code archive). */
              dockerfile: Type.Optional(
                Type.Object({
                  text: Type.String({ maxLength: 1024 * 1024 }),
                  context_sha256: Type.String({ pattern: "^[0-9a-f]{64}$" }),
                }),
              ),
              base_image_creds: Type.Optional(
                Type.Record(Type.String({ pattern: "^[A-Za-z_][A-Za-z0-9_]*$" }), Type.String()),
              ),
            },
            { additionalProperties: false },
          ),
        },
      },
      async (req, reply) => {
        const wsId = workspaceOf(req);
        const { image, base_image_creds, dockerfile } = req.body as {
          dockerfile?: { text: string; context_sha256: string };
          image: Parameters<ImageBuilds["build"]>[1];
          base_image_creds?: Record<string, string>;
        };
        const abort = new AbortController();
        // Refusals of the spec come before the stream starts, as an ordinary error answer.
        const updates = builds
          .build(wsId, image, {
            signal: abort.signal,
            ...(base_image_creds ? { baseImageCreds: base_image_creds } : {}),
            ...(dockerfile
              ? { dockerfile: { text: dockerfile.text, contextSha256: dockerfile.context_sha256 } }
              : {}),
          })
          [Symbol.asyncIterator]();
        const first = await updates.next();
        const out = new PassThrough();
        reply.raw.on("close", () => abort.abort());
        reply.type("application/x-ndjson").send(out);
        const write = (o: Record<string, unknown>) => out.write(`${JSON.stringify(o)}\n`);
        void (async () => {
          try {
            if (!first.done) write(buildLine(first.value));
            for (let n = await updates.next(); !n.done; n = await updates.next()) write(buildLine(n.value));
          } catch (e) {
            // Through the one error edge: an unexpected error is logged with an id and masked, never
            // written to the client as its own text.
            const { body } = publicError(e, { log: reply.log, what: "image build failed" });
            write({ event: "error", error: { details: {}, ...(body as { error: object }).error } });
          } finally {
            out.end();
          }
        })();
        return reply;
      },
    );
  };
}
