// Processes in a sandbox (docs/sandboxes.md): start, list, output (raw bytes,
// followed live), stdin, kill, wait. The output route answers bytes, so its
// failures keep their HTTP status; the others follow the gateway convention.
// The sandbox's agent keeps the processes, so any coordinator answers these.

import { Readable } from "node:stream";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync, FastifyRequest } from "fastify";
import type { ExecRequest, OutputStream } from "../../api/index.ts";
import { RUN_CONTENT_TYPE, runFrames } from "./process-run.ts";
import type { SandboxService } from "./service.ts";
import { principalOf } from "../http/index.ts";
import { GatewayFailure, gatewayResponse } from "../http/index.ts";
import {
  ProcessBody,
  ProcessParams,
  SANDBOXES,
  SandboxParams,
  bodyChunks,
  installRawErrors,
  passBodyThrough,
  processJson,
} from "./routes-common.ts";

const ws = (req: FastifyRequest) => principalOf(req).workspace.id;

const ExecBody = Type.Object(
  {
    args: Type.Array(Type.String({ maxLength: 1024 * 1024 }), { minItems: 1, maxItems: 4096 }),
    cwd: Type.Optional(Type.Union([Type.String({ minLength: 1, maxLength: 4096 }), Type.Null()])),
    env: Type.Optional(Type.Union([Type.Record(Type.String(), Type.String()), Type.Null()])),
  },
  { additionalProperties: false },
);
type ExecBodyType = { args: string[]; cwd?: string | null; env?: Record<string, string> | null };

const execRequestOf = (b: ExecBodyType): ExecRequest => ({
  args: b.args,
  ...(b.cwd ? { cwd: b.cwd } : {}),
  ...(b.env ? { env: b.env } : {}),
});
const SIGNALS = [
  "SIGKILL",
  "SIGTERM",
  "SIGINT",
  "SIGHUP",
  "SIGQUIT",
  "SIGUSR1",
  "SIGUSR2",
  "SIGSTOP",
  "SIGCONT",
] as const;

export function gatewaySandboxProcessRoutes(sandboxes: SandboxService): FastifyPluginAsync {
  return async (app) => {
    await app.register(async (json) => {
      passBodyThrough(json);

      json.post(
        `${SANDBOXES}/:id/processes`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary: "Starts a process in a sandbox; answers its pid",
            params: SandboxParams,
            body: ExecBody,
            response: gatewayResponse(Type.Object({ ok: Type.Literal(true), pid: Type.Integer() })),
          },
        },
        async (req) => {
          const { id } = req.params as { id: string };
          const p = await sandboxes.exec(ws(req), id, execRequestOf(req.body as ExecBodyType));
          return { ok: true as const, pid: p.pid };
        },
      );

      json.get(
        `${SANDBOXES}/:id/processes`,
        {
          config: { access: { needs: "read" } },
          schema: {
            summary: "The processes of a sandbox with their status and exit codes",
            params: SandboxParams,
            response: gatewayResponse(
              Type.Object({ ok: Type.Literal(true), processes: Type.Array(ProcessBody) }),
            ),
          },
        },
        async (req) => {
          const { id } = req.params as { id: string };
          return {
            ok: true as const,
            processes: (await sandboxes.listProcesses(ws(req), id)).map(processJson),
          };
        },
      );

      json.get(
        `${SANDBOXES}/:id/processes/:pid`,
        {
          config: { access: { needs: "read" } },
          schema: {
            summary: "One process of a sandbox: its args, status and exit code",
            params: ProcessParams,
            response: gatewayResponse(Type.Composite([Type.Object({ ok: Type.Literal(true) }), ProcessBody])),
          },
        },
        async (req) => {
          const { id, pid } = req.params as { id: string; pid: number };
          return { ok: true as const, ...processJson(await sandboxes.process(ws(req), id, pid)) };
        },
      );

      json.post(
        `${SANDBOXES}/:id/processes/:pid/stdin`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary: "Writes the raw body to a process's stdin (eof closes it); answers the bytes written",
            params: ProcessParams,
            querystring: Type.Object({ eof: Type.Optional(Type.Boolean()) }),
            response: gatewayResponse(Type.Object({ ok: Type.Literal(true), written: Type.Integer() })),
          },
        },
        async (req) => {
          const { id, pid } = req.params as { id: string; pid: number };
          const { eof } = req.query as { eof?: boolean };
          const written = await sandboxes.writeStdin(ws(req), id, pid, bodyChunks(req.body), eof === true);
          return { ok: true as const, written };
        },
      );

      json.post(
        `${SANDBOXES}/:id/processes/:pid/kill`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary: "Sends a signal to a process (default SIGKILL)",
            params: ProcessParams,
            body: Type.Optional(
              Type.Object(
                { signal: Type.Optional(Type.Union(SIGNALS.map((s) => Type.Literal(s)))) },
                { additionalProperties: false },
              ),
            ),
            response: gatewayResponse(Type.Object({ ok: Type.Literal(true), killed: Type.Literal(true) })),
          },
        },
        async (req) => {
          const { id, pid } = req.params as { id: string; pid: number };
          const signal = (req.body as { signal?: NodeJS.Signals } | undefined)?.signal ?? "SIGKILL";
          await sandboxes.kill(ws(req), id, pid, signal);
          return { ok: true as const, killed: true as const };
        },
      );

      json.post(
        `${SANDBOXES}/:id/processes/:pid/wait`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary:
              "Waits for a process to end or the timeout to pass; answers its exit code (-1: still running)",
            params: ProcessParams,
            body: Type.Optional(
              Type.Object(
                { timeout_seconds: Type.Optional(Type.Union([Type.Number({ minimum: 0 }), Type.Null()])) },
                { additionalProperties: false },
              ),
            ),
            response: gatewayResponse(
              Type.Object({ ok: Type.Literal(true), exit_code: Type.Integer(), status: Type.String() }),
            ),
          },
        },
        async (req, reply) => {
          const { id, pid } = req.params as { id: string; pid: number };
          const t = (req.body as { timeout_seconds?: number | null } | undefined)?.timeout_seconds;
          // The response's close before it is sent: the client went away.
          const gone = new AbortController();
          reply.raw.once("close", () => gone.abort());
          const s = await sandboxes.wait(ws(req), id, pid, {
            ...(t === undefined || t === null ? {} : { timeoutMs: t * 1000 }),
            signal: gone.signal,
          });
          return { ok: true as const, exit_code: s.exitCode, status: s.status };
        },
      );
    });

    await app.register(async (raw) => {
      installRawErrors(raw);

      // exec, output and exit in one round trip: a stream of frames (process-run.ts).
      raw.post(
        `${SANDBOXES}/:id/processes/run`,
        {
          config: { access: { needs: "write" } },
          schema: {
            summary:
              "Runs a process in one round trip: streams frames of its start, stdout and stderr, and exit code",
            params: SandboxParams,
            body: ExecBody,
            response: { "4xx": GatewayFailure, "5xx": GatewayFailure },
          },
        },
        async (req, reply) => {
          const { id } = req.params as { id: string };
          const b = req.body as ExecBodyType;
          const gone = new AbortController();
          // Only a client that left before the end stops the run (an abort's reason costs a stack trace).
          reply.raw.once("close", () => {
            if (!reply.raw.writableFinished) gone.abort();
          });
          const run = await sandboxes.run(ws(req), id, execRequestOf(b), gone.signal);
          reply.type(RUN_CONTENT_TYPE);
          return reply.send(Readable.from(runFrames(run.started, run.events)));
        },
      );

      raw.get(
        `${SANDBOXES}/:id/processes/:pid/output`,
        {
          config: { access: { needs: "read" } },
          schema: {
            summary: "A process's output as raw bytes from an offset; with follow, until the process ends",
            params: ProcessParams,
            querystring: Type.Object({
              stream: Type.Optional(
                Type.Union([Type.Literal("stdout"), Type.Literal("stderr"), Type.Literal("combined")]),
              ),
              offset: Type.Optional(Type.Integer({ minimum: 0 })),
              follow: Type.Optional(Type.Boolean()),
            }),
            response: { "4xx": GatewayFailure, "5xx": GatewayFailure },
          },
        },
        async (req, reply) => {
          const { id, pid } = req.params as { id: string; pid: number };
          const q = req.query as { stream?: OutputStream; offset?: number; follow?: boolean };
          const stream = q.stream ?? "combined";
          if (!q.follow) {
            const out = await sandboxes.readOutput(ws(req), id, pid, stream, q.offset ?? 0);
            reply.header("X-Output-Start", String(out.start)).type("application/octet-stream");
            return reply.send(Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength));
          }
          const gone = new AbortController();
          reply.raw.once("close", () => gone.abort());
          const f = await sandboxes.followOutput(ws(req), id, pid, stream, q.offset ?? 0, gone.signal);
          reply.header("X-Output-Start", String(f.start)).type("application/octet-stream");
          return reply.send(Readable.from(f.chunks));
        },
      );
    });
  };
}
