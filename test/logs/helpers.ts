// A real nats-server with BERTH_LOGS, a real SQLite store with two
// workspaces, the LogQuery and the logs routes on a listening Fastify app,
// and an agent-user connection that stores batches as agents do.

import pino from "pino";
import { ensureStreams } from "../../coordinator/fleet/streams.ts";
import { logRoutes } from "../../coordinator/logs/routes.ts";
import { workspaceRoutes } from "../../coordinator/workspaces/routes.ts";
import { tokenScope } from "../../coordinator/http/scopes.ts";
import { LogQuery } from "../../coordinator/logs/index.ts";
import { type ContainerLogBatch, logSubjectToken, subjects } from "../../shared/subjects.ts";
import { listenRoutes, type RoutesOnNats, startNatsStore, twoWorkspaces } from "../helpers/nats-store.ts";

export interface LogHarness extends RoutesOnNats {
  logs: LogQuery;
  /** Stores one batch as agent `agentId` would (acknowledged by JetStream). */
  store1(b: Omit<ContainerLogBatch, "agentId"> & { agentId?: string }): Promise<void>;
}

export async function startLogHarness(
  suite: { after: (fn: () => unknown) => void },
  o: { heartbeatMs?: number } = {},
): Promise<LogHarness> {
  const { nats, store, nc, agentNc, defer } = await startNatsStore(suite);
  await ensureStreams(await nc.jetstreamManager());
  const logs = new LogQuery({ nats: nc, log: pino({ level: "silent" }) });
  const { app, baseUrl } = await listenRoutes(defer, async (app) => {
    // GET /workspace/current, which the CLI asks first.
    await app.register(
      tokenScope(
        store.tokens,
        workspaceRoutes(store),
        logRoutes({ logs, ...(o.heartbeatMs ? { heartbeatMs: o.heartbeatMs } : {}) }),
      ),
    );
  });
  const workspaces = await twoWorkspaces(store, "logs");
  const js = agentNc.jetstream();
  return {
    nats,
    store,
    logs,
    app,
    baseUrl,
    ...workspaces,
    async store1(b) {
      const full: ContainerLogBatch = { agentId: "agent-1", ...b };
      const subject = subjects.containerLogs(
        full.agentId,
        logSubjectToken(full.workspaceId),
        logSubjectToken(full.stubId),
        logSubjectToken(full.containerId),
        logSubjectToken(full.taskId),
      );
      await js.publish(subject, JSON.stringify(full));
    },
  };
}
