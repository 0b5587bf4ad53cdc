// GET /api/v1/gateway/deployments/{id}/logs (docs/deployments.md): the
// container output of a deployment as NDJSON `{container_id, stream, line, ts}`,
// for `berth serve`. With follow, containers that start later are followed
// too, until the client disconnects. Only what the containers print is sent:
// nothing of their environment (secrets) is added here.

import { once } from "node:events";
import { PassThrough } from "node:stream";
import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import type { ContainerApi, LogEntry } from "../../api/index.ts";
import type { TokenRepo } from "../store/index.ts";
import { principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";
import { gatewayScope } from "../http/index.ts";

/** A container of the stub as the container manager knows it. */
export interface StubContainer {
  id: string;
  agentId: string;
  /** "starting" ones are not followed until they run (the agent may not have them yet). */
  state: string;
}

export interface DeploymentLogDeps {
  tokens: TokenRepo;
  /** The deployment's stub; throws BerthError not_found for an id not in that workspace. */
  lookup(workspaceId: string, deploymentId: string): Promise<{ stubId: string }>;
  containersOf(stubId: string): StubContainer[];
  /** Calls fn whenever containers start, change state or go; returns an unsubscribe. */
  onContainersChange(fn: () => void): () => void;
  agents: { client(agentId: string): Pick<ContainerApi, "streamLogs"> };
  /** Where a container stream's failure is reported (it ends that container's lines only). */
  onStreamError?(containerId: string, err: unknown): void;
}

/** Lines of each container already there when the request came, by default. */
export const DEFAULT_LOG_TAIL = 100;
const MAX_LOG_TAIL = 10_000;

const Params = Type.Object({ id: Type.String({ minLength: 1, maxLength: 200 }) });
const Query = Type.Object({
  follow: Type.Optional(
    Type.Union([Type.Literal("1"), Type.Literal("0"), Type.Literal("true"), Type.Literal("false")]),
  ),
  tail: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_LOG_TAIL })),
});

const lineJson = (e: LogEntry) =>
  `${JSON.stringify({ container_id: e.containerId, stream: e.stream, line: e.line, ts: e.ts })}\n`;

/**
 * The deployment log stream: a gateway route, registered as a gateway scope
 * of its own (coordinator/http/scopes.ts) because it is also mounted alone.
 */
export function deploymentLogRoutes(deps: DeploymentLogDeps): FastifyPluginAsync {
  return gatewayScope(deps.tokens, async (app) => {
    app.get(
      "/api/v1/gateway/deployments/:id/logs",
      {
        config: { access: { needs: "read" } },
        schema: {
          summary:
            "The deployment's container output as NDJSON lines; with follow, until the client disconnects",
          params: Params,
          querystring: Query,
          response: gatewayResponse(Type.Object({ ok: Type.Literal(true) })),
        },
      },
      async (req, reply) => {
        const { id } = req.params as { id: string };
        const q = req.query as { follow?: string; tail?: number };
        const follow = q.follow === "1" || q.follow === "true";
        const tail = q.tail ?? DEFAULT_LOG_TAIL;
        // Before the stream starts, so an unknown id is an ordinary gateway error.
        const { stubId } = await deps.lookup(principalOf(req).workspace.id, id);

        const out = new PassThrough();
        const abort = new AbortController();
        const followed = new Set<string>();
        const running = new Set<Promise<void>>();
        let unsubscribe: (() => void) | undefined;
        let ended = false;
        const end = () => {
          if (ended) return;
          ended = true;
          unsubscribe?.();
          abort.abort();
          out.end();
        };

        const streamOne = async (c: StubContainer, fromStart: boolean) => {
          try {
            const entries = deps.agents.client(c.agentId).streamLogs(c.id, {
              follow,
              ...(fromStart ? {} : { tail }),
              signal: abort.signal,
            });
            for await (const e of entries) {
              if (ended) return;
              // A slow client holds the agent's stream back instead of filling memory here.
              if (!out.write(lineJson(e))) await once(out, "drain", { signal: abort.signal });
            }
          } catch (err) {
            if (!abort.signal.aborted) deps.onStreamError?.(c.id, err);
          }
        };
        const start = (c: StubContainer, fromStart: boolean) => {
          if (followed.has(c.id) || c.state === "starting") return;
          followed.add(c.id);
          const p = streamOne(c, fromStart).finally(() => {
            running.delete(p);
            if (!follow && running.size === 0) end();
          });
          running.add(p);
        };

        reply.raw.on("close", end);
        if (follow) {
          // Containers that start after the request: their whole output.
          unsubscribe = deps.onContainersChange(() => {
            if (ended) return;
            for (const c of deps.containersOf(stubId)) start(c, true);
          });
        }
        for (const c of deps.containersOf(stubId)) start(c, false);
        if (!follow && running.size === 0) end();
        return reply.type("application/x-ndjson").send(out);
      },
    );
  });
}
