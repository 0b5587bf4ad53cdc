// What the coordinator-side harnesses (events, logs) start from: a real
// nats-server, a real SQLite store, a connection with the coordinator's
// credentials and one with the agents', torn down last in, first out after
// the suite; and the routes under test on a listening Fastify app.

import type { FastifyInstance } from "fastify";
import { connect, type NatsConnection } from "nats";
import { Store } from "../../coordinator/records.ts";
import type { Workspace } from "../../coordinator/store/workspaces.ts";
import { closeNats } from "../../shared/nats-server.ts";
import { tempDir } from "./env.ts";
import { startTestNats, type TestNats } from "./nats.ts";
import { routesApp } from "./routes-app.ts";
import { teardownStack } from "./suite.ts";

export interface NatsStore {
  nats: TestNats;
  /** A temp dir removed at teardown; the store's database is in it. */
  dir: string;
  store: Store;
  /** Connected with the coordinator's credentials. */
  nc: NatsConnection;
  /** Connected with the agents' credentials. */
  agentNc: NatsConnection;
  /** Runs `fn` at teardown, before everything started earlier is stopped. */
  defer(fn: () => unknown): void;
  /** Another connection with the coordinator's credentials, closed at teardown. */
  connectCoordinator(): Promise<NatsConnection>;
}

export async function startNatsStore(suite: { after: (fn: () => unknown) => void }): Promise<NatsStore> {
  const { defer, later } = teardownStack(suite);
  const nats = await startTestNats(later);
  const dir = tempDir(later);
  const store = await Store.open(`sqlite:${dir}/berth.db`);
  defer(() => store.close());
  const connectCoordinator = async () => {
    const nc = await connect({
      servers: nats.url,
      user: nats.coordinator.user,
      pass: nats.coordinator.password,
    });
    defer(() => closeNats(nc));
    return nc;
  };
  const nc = await connectCoordinator();
  const agentNc = await connect({ servers: nats.url, user: nats.agent.user, pass: nats.agent.password });
  defer(() => closeNats(agentNc));
  return { nats, dir, store, nc, agentNc, defer, connectCoordinator };
}

/** What a routes harness over NATS hands its tests: the server, the store, the listening app, two workspaces with a token each. */
export interface RoutesOnNats {
  nats: TestNats;
  store: Store;
  app: FastifyInstance;
  baseUrl: string;
  ws: Workspace;
  other: Workspace;
  token: string;
  otherToken: string;
}

/** A Fastify app configured as the coordinator's, with `register`'s routes, listening on loopback until teardown. */
export async function listenRoutes(
  defer: (fn: () => unknown) => void,
  register: (app: FastifyInstance) => PromiseLike<unknown>,
): Promise<{ app: FastifyInstance; baseUrl: string }> {
  const app = routesApp();
  await register(app);
  await app.listen({ host: "127.0.0.1", port: 0 });
  defer(() => app.close());
  const addr = app.server.address();
  return { app, baseUrl: `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}` };
}

/** Two workspaces, `<prefix>-main` and `<prefix>-other`, each with a user token. */
export async function twoWorkspaces(
  store: Store,
  prefix: string,
): Promise<{ ws: Workspace; other: Workspace; token: string; otherToken: string }> {
  const ws = await store.workspaces.create(`${prefix}-main`);
  const other = await store.workspaces.create(`${prefix}-other`);
  const token = (await store.tokens.create(ws.id, { name: "user" })).secret;
  const otherToken = (await store.tokens.create(other.id, { name: "user" })).secret;
  return { ws, other, token, otherToken };
}
