// Bots (docs/bots.md), wired for the composition root: the session engine,
// the deployed bots it resolves, the websocket route and the model calls of
// transitions (op model.chat of the agents' state relay).

import { request as httpRequest, type Server } from "node:http";
import type { NatsConnection } from "nats";
import { Server as HttpsServer, request as httpsRequest } from "node:https";
import type { Logger } from "pino";
import { BerthError, describeError } from "../../shared/errors.ts";
import { MAX_MODEL_CALL_MS } from "../../shared/objects.ts";
import type { DeploymentService } from "../deployments/index.ts";
import type { StateObjects } from "../state/index.ts";
import type { BotSessionRepo } from "../store/index.ts";
import type { TokenRepo } from "../store/index.ts";
import { DeployedBots } from "./directory.ts";
import { type BotTasks, BotEngine, UNSETTLED_AFTER_MS } from "./engine.ts";
import { NatsBotEventBus } from "./event-bus.ts";
import { BotModelCalls, type Inject } from "./model-calls.ts";
import { attachBotUpgrades } from "./websocket.ts";

export { BotEngine } from "./engine.ts";

export interface BotsDeps {
  store: { botSessions: BotSessionRepo; tokens: TokenRepo };
  /** Answers the transitions' model.chat through the bots' model calls. */
  state: Pick<StateObjects, "useModels">;
  deployments: Pick<DeploymentService, "resolveByName" | "resolveById">;
  tasks: BotTasks;
  /** Session messages reach the websockets of every coordinator over it (docs/bots.md, "Events and several coordinators"). */
  nats?: NatsConnection;
  log: Logger;
  /** How often the firings a dead coordinator left are looked for. @default UNSETTLED_AFTER_MS * 3 */
  sweepEveryMs?: number;
}

export function createBots(d: BotsDeps) {
  const tokens = d.store.tokens;
  const directory = new DeployedBots(d.deployments);
  const engine = new BotEngine({
    sessions: d.store.botSessions,
    bots: directory,
    tasks: d.tasks,
    log: d.log,
    ...(d.nats ? { bus: new NatsBotEventBus(d.nats, d.log) } : {}),
  });
  let inject: Inject | undefined;
  const models = new BotModelCalls(tokens, () => {
    if (!inject) throw new Error("bots: the HTTP app is not built yet");
    return inject;
  });
  d.state.useModels(models);
  let detach: (() => void) | undefined;
  let sweeper: NodeJS.Timeout | undefined;
  return {
    engine,
    models,
    /** The websocket route on the app's server, and /v1 in process for the model calls. */
    attach(app: { server: Server }): void {
      inject = selfPost(app.server);
      detach = attachBotUpgrades(app.server, { engine, bots: directory, tokens, log: d.log });
      // Firings a stopped coordinator left in flight: their tasks are followed again.
      engine
        .resume()
        .then((n) => n > 0 && d.log.info({ firings: n }, "bots: following the firings in flight"))
        .catch((e) => d.log.error({ err: describeError(e) }, "bots: cannot pick up the firings in flight"));
      // ... and those of a coordinator that dies while this one runs.
      sweeper = setInterval(
        () => {
          engine
            .sweep()
            .then(
              (n) => n > 0 && d.log.info({ firings: n }, "bots: settled firings a stopped coordinator left"),
            )
            .catch((e) => d.log.warn({ err: describeError(e) }, "bots: cannot look for firings left behind"));
        },
        d.sweepEveryMs ?? UNSETTLED_AFTER_MS * 3,
      );
      sweeper.unref();
    },
    async close(): Promise<void> {
      if (sweeper) clearInterval(sweeper);
      detach?.();
      engine.close();
      await models.close();
    },
  };
}

/**
 * A POST to the server's own listening address over loopback (an address of
 * every interface is reached on loopback). TLS: the peer is this process's
 * own listener, so its certificate (made for the public name) is not checked.
 */
export function selfPost(server: Server): Inject {
  return (o) =>
    new Promise((resolve, reject) => {
      const addr = server.address();
      if (!addr || typeof addr !== "object")
        return reject(new BerthError("unavailable", "the coordinator is not listening yet"));
      const host = addr.address === "::" || addr.address === "0.0.0.0" ? "localhost" : addr.address;
      const tls = server instanceof HttpsServer;
      const req = (tls ? httpsRequest : httpRequest)(
        {
          hostname: host,
          port: addr.port,
          method: o.method,
          path: o.url,
          headers: { ...o.headers, "content-length": String(Buffer.byteLength(o.payload)) },
          timeout: MAX_MODEL_CALL_MS,
          ...(tls ? { rejectUnauthorized: false } : {}),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on("data", (c: Buffer) => chunks.push(c));
          res.on("end", () =>
            resolve({ statusCode: res.statusCode ?? 502, body: Buffer.concat(chunks).toString("utf8") }),
          );
          res.on("error", reject);
        },
      );
      req.on("timeout", () => req.destroy(new BerthError("unavailable", "the model did not answer in time")));
      req.on("error", reject);
      req.end(o.payload);
    });
}
export { BotDefinitionSchema } from "./definition.ts";
export { botRoutes } from "./routes.ts";
