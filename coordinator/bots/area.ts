// The bots area's factory: the engine, its model calls, routes and firings' sweep.

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { DeploymentService } from "../deployments/index.ts";
import type { BotSessionRepo } from "./store.ts";
import type { TokenRepo } from "../store/index.ts";
import type { RelayRouter } from "../streams/index.ts";
import { DeployedBots } from "./directory.ts";
import { type BotTasks, BotEngine, UNSETTLED_AFTER_MS } from "./engine.ts";
import { NatsBotEventBus } from "./event-bus.ts";
import { type BotInference, BotModelCalls } from "./model-calls.ts";
import { botRoutes } from "./routes.ts";
import { botSessionRoute } from "./websocket.ts";
import type { Area, AreaRoutes, RawRoute } from "../http/index.ts";

export interface BotsDeps {
  store: { botSessions: BotSessionRepo; tokens: TokenRepo };
  /** The /v1 gateway in process (InProcessInference): the transitions' model calls. */
  inference: BotInference;
  /** The containers' relayed calls: the bots serve model.chat on it. */
  relay: Pick<RelayRouter, "serve">;
  deployments: Pick<DeploymentService, "resolveByName" | "resolveById">;
  tasks: BotTasks;
  /** Session messages reach the websockets of every coordinator over it (docs/bots.md, "Events and several coordinators"). */
  nats?: NatsConnection;
  log: Logger;
  /** How often the firings a dead coordinator left are looked for. @default UNSETTLED_AFTER_MS * 3 */
  sweepEveryMs?: number;
}

/** The bot routes (token-scoped) and the session websocket (in the data plane's table). */
export function botsHttpRoutes(engine: BotEngine, sessions: RawRoute): AreaRoutes {
  return { api: [botRoutes(engine)], raw: [sessions] };
}

export function createBots(d: BotsDeps): Area<{ engine: BotEngine; models: BotModelCalls }> {
  const tokens = d.store.tokens;
  const directory = new DeployedBots(d.deployments);
  const engine = new BotEngine({
    sessions: d.store.botSessions,
    bots: directory,
    tasks: d.tasks,
    log: d.log,
    ...(d.nats ? { bus: new NatsBotEventBus(d.nats, d.log) } : {}),
  });
  const models = new BotModelCalls(d.inference);
  models.serveOn(d.relay);
  let sweeper: NodeJS.Timeout | undefined;
  return {
    service: { engine, models },
    routes: botsHttpRoutes(engine, botSessionRoute({ engine, bots: directory, tokens, log: d.log })),
    /** Follows the firings in flight: a stopped coordinator's at once, a dying one's by a sweep. */
    start(): void {
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
    async stop(): Promise<void> {
      if (sweeper) clearInterval(sweeper);
      engine.close();
    },
  };
}
