// Shapes and helpers shared by the sandbox gateway routes (docs/sandboxes.md).

import { Type } from "@sinclair/typebox";
import type { FastifyInstance } from "fastify";
import type { FileInfo, ProcessInfo } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import type { SandboxView } from "./types.ts";
import { publicError } from "../http/index.ts";

export const SANDBOXES = "/api/v1/gateway/sandboxes";

export const SandboxParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 128 }) });
export const ProcessParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 128 }),
  pid: Type.Integer({ minimum: 1 }),
});

const Nullable = <T extends Parameters<typeof Type.Union>[0][number]>(t: T) => Type.Union([t, Type.Null()]);

export const Urls = Type.Record(Type.String(), Type.String());
export const Network = Type.Object({
  block_network: Type.Boolean(),
  allow_list: Nullable(Type.Array(Type.String())),
});

export const SandboxBody = Type.Object({
  sandbox_id: Type.String(),
  container_id: Type.String(),
  stub_id: Type.String(),
  kind: Type.Union([Type.Literal("sandbox"), Type.Literal("pod")]),
  status: Type.Union([Type.Literal("starting"), Type.Literal("running"), Type.Literal("terminated")]),
  created_at: Type.String(),
  expires_at: Nullable(Type.String()),
  ttl_seconds: Type.Integer(),
  urls: Urls,
  network: Network,
  terminated_at: Nullable(Type.String()),
  terminated_reason: Nullable(Type.String()),
  exit_code: Nullable(
    Type.Integer({ description: "once its container ended on its own; 0: a pod that finished" }),
  ),
});

export const sandboxJson = (v: SandboxView) => ({
  sandbox_id: v.sandboxId,
  container_id: v.sandboxId,
  stub_id: v.stubId,
  kind: v.kind,
  status: v.status,
  created_at: v.createdAt,
  expires_at: v.expiresAt,
  ttl_seconds: v.ttlSeconds,
  urls: v.urls,
  network: v.network,
  terminated_at: v.terminatedAt,
  terminated_reason: v.terminatedReason,
  exit_code: v.exitCode,
});

export const ProcessBody = Type.Object({
  pid: Type.Integer(),
  args: Type.Array(Type.String()),
  cwd: Nullable(Type.String()),
  exit_code: Type.Integer(),
  status: Type.String({ description: "running, exited, killed or error" }),
  started_at: Type.String(),
  ended_at: Nullable(Type.String()),
  error: Type.Optional(Type.String()),
});

export const processJson = (p: ProcessInfo) => ({
  pid: p.pid,
  args: p.args,
  cwd: p.cwd,
  exit_code: p.exitCode,
  status: p.status,
  started_at: new Date(p.startedAt).toISOString(),
  ended_at: p.endedAt === undefined ? null : new Date(p.endedAt).toISOString(),
  ...(p.error ? { error: p.error } : {}),
});

export const FileInfoBody = Type.Object({
  name: Type.String(),
  path: Type.String(),
  size: Type.Integer(),
  is_dir: Type.Boolean(),
  is_symlink: Type.Boolean(),
  mod_time: Type.String({ description: "ISO 8601" }),
  mode: Type.Integer(),
  permissions: Type.String({ description: 'ls -l form, e.g. "-rw-r--r--"' }),
  owner: Type.String(),
  group: Type.String(),
  uid: Type.Integer(),
  gid: Type.Integer(),
});

export const fileJson = (f: FileInfo) => ({
  name: f.name,
  path: f.path,
  size: f.size,
  is_dir: f.isDir,
  is_symlink: f.isSymlink,
  mod_time: new Date(f.modTime).toISOString(),
  mode: f.mode,
  permissions: f.permissions,
  owner: f.owner,
  group: f.group,
  uid: f.uid,
  gid: f.gid,
});

/**
 * Routes that answer raw bytes cannot carry `ok` in a 200: their failures
 * keep the error's own HTTP status (with the gateway's body shape).
 */
export function installRawErrors(app: FastifyInstance): void {
  app.setErrorHandler((err, req, reply) => {
    const pe = publicError(err, { shape: "gateway-raw", log: req.log, what: "gateway request failed" });
    if (reply.sent || reply.raw.headersSent) {
      reply.raw.destroy();
      return;
    }
    reply.status(pe.status).headers(pe.headers).type("application/json").send(pe.body);
  });
}

/** A raw body handed over as a stream (never buffered whole). */
export function passBodyThrough(app: FastifyInstance): void {
  app.addContentTypeParser("application/octet-stream", (_req, payload, done) => done(null, payload));
}

/** The request body as chunks: the stream, or nothing when there is no body. */
export async function* bodyChunks(body: unknown): AsyncGenerator<Uint8Array> {
  if (body === undefined || body === null) return;
  if (body instanceof Uint8Array) {
    yield body;
    return;
  }
  if (typeof (body as AsyncIterable<Uint8Array>)[Symbol.asyncIterator] === "function") {
    for await (const c of body as AsyncIterable<Uint8Array | string>)
      yield typeof c === "string" ? Buffer.from(c) : c;
    return;
  }
  if (typeof body === "string") {
    yield Buffer.from(body);
    return;
  }
  throw new BerthError("invalid_request", "send the bytes with Content-Type: application/octet-stream");
}
