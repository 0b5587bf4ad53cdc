// A real nats-server with BERTH_LOGS, a real SQLite store with two
// workspaces, the LogQuery and the logs routes on a listening Fastify app,
// and an agent-user connection that stores batches as agents do.

import Fastify, { type FastifyInstance } from "fastify";
import { connect, type NatsConnection } from "nats";
import pino from "pino";
import { ensureStreams } from "../../coordinator/fleet/streams.ts";
import { installErrorHandlers } from "../../coordinator/http/errors.ts";
import { logRoutes } from "../../coordinator/http/routes/logs.ts";
import { workspaceRoutes } from "../../coordinator/http/routes/workspace.ts";
import { LogQuery } from "../../coordinator/logs/index.ts";
import { Store } from "../../coordinator/store/store.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { type ContainerLogBatch, logSubjectToken, subjects } from "../../shared/subjects.ts";
import { tempDir } from "../helpers/env.ts";
import { startTestNats, type TestNats } from "../helpers/nats.ts";

export interface LogHarness {
  nats: TestNats;
  store: Store;
  logs: LogQuery;
  app: FastifyInstance;
  baseUrl: string;
  ws: Workspace;
  other: Workspace;
  token: string;
  otherToken: string;
  /** Stores one batch as agent `agentId` would (acknowledged by JetStream). */
  store1(b: Omit<ContainerLogBatch, "agentId"> & { agentId?: string }): Promise<void>;
}

export async function startLogHarness(
  suite: { after: (fn: () => unknown) => void },
  o: { heartbeatMs?: number } = {},
): Promise<LogHarness> {
  const cleanups: (() => unknown)[] = [];
  suite.after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  const later = { after: (fn: () => unknown) => cleanups.push(fn) };
  const nats = await startTestNats(later);
  const dir = tempDir(later);
  const store = await Store.open(`sqlite:${dir}/berth.db`);
  cleanups.push(() => store.close());
  const nc: NatsConnection = await connect({
    servers: nats.url,
    user: nats.coordinator.user,
    pass: nats.coordinator.password,
  });
  cleanups.push(() => closeNats(nc));
  await ensureStreams(await nc.jetstreamManager());
  const agentNc = await connect({ servers: nats.url, user: nats.agent.user, pass: nats.agent.password });
  cleanups.push(() => closeNats(agentNc));
  const logs = new LogQuery({ nats: nc, log: pino({ level: "silent" }) });

  const app = Fastify({ logger: false });
  app.decorateRequest("principal", null);
  installErrorHandlers(app);
  // GET /workspace/current, which the CLI asks first.
  await app.register(workspaceRoutes(store));
  await app.register(
    logRoutes({ tokens: store.tokens, logs, ...(o.heartbeatMs ? { heartbeatMs: o.heartbeatMs } : {}) }),
  );
  await app.listen({ host: "127.0.0.1", port: 0 });
  cleanups.push(() => app.close());
  const addr = app.server.address();
  const baseUrl = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;

  const ws = await store.workspaces.create("logs-main");
  const other = await store.workspaces.create("logs-other");
  const token = (await store.tokens.create(ws.id, { name: "user" })).secret;
  const otherToken = (await store.tokens.create(other.id, { name: "user" })).secret;
  const js = agentNc.jetstream();
  return {
    nats,
    store,
    logs,
    app,
    baseUrl,
    ws,
    other,
    token,
    otherToken,
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

export interface SseEvent {
  id?: string;
  event?: string;
  data?: string;
}

/** Reads server-sent events (and comments) from a streaming response until `enough` says so. */
export async function readSse(res: Response, enough: (evs: SseEvent[], comments: string[]) => boolean) {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  const evs: SseEvent[] = [];
  const comments: string[] = [];
  let buf = "";
  while (!enough(evs, comments)) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let at = buf.indexOf("\n\n");
    while (at >= 0) {
      const block = buf.slice(0, at);
      buf = buf.slice(at + 2);
      const ev: SseEvent = {};
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) comments.push(line.slice(1).trim());
        else {
          const i = line.indexOf(": ");
          (ev as Record<string, string>)[line.slice(0, i)] = line.slice(i + 2);
        }
      }
      if (ev.id) evs.push(ev);
      at = buf.indexOf("\n\n");
    }
  }
  await reader.cancel();
  return { evs, comments };
}
