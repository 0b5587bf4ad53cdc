// Bots (docs/bots.md), wired for the composition root: the session engine,
// the deployed bots it resolves, the websocket route and the model calls of
// transitions (op model.chat of the agents' state relay).

import type { Server } from "node:http";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { DeploymentService } from "../deployments/service.ts";
import type { StateObjects } from "../objects/state.ts";
import type { BotSessionRepo } from "../store/bot-sessions.ts";
import type { TokenRepo } from "../store/workspaces.ts";
import { DeployedBots } from "./directory.ts";
import { type BotTasks, BotEngine } from "./engine.ts";
import { BotModelCalls, type Inject } from "./model-calls.ts";
import { attachBotUpgrades } from "./websocket.ts";

export { BotEngine } from "./engine.ts";

export interface BotsDeps {
  store: { botSessions: BotSessionRepo; tokens: TokenRepo };
  /** Answers the transitions' model.chat through the bots' model calls. */
  state: Pick<StateObjects, "useModels">;
  deployments: Pick<DeploymentService, "resolveByName" | "resolveById">;
  tasks: BotTasks;
  log: Logger;
}

export function createBots(d: BotsDeps) {
  const tokens = d.store.tokens;
  const directory = new DeployedBots(d.deployments);
  const engine = new BotEngine({
    sessions: d.store.botSessions,
    bots: directory,
    tasks: d.tasks,
    log: d.log,
  });
  let inject: Inject | undefined;
  const models = new BotModelCalls(tokens, () => {
    if (!inject) throw new Error("bots: the HTTP app is not built yet");
    return inject;
  });
  d.state.useModels(models);
  let detach: (() => void) | undefined;
  return {
    engine,
    models,
    /** The websocket route on the app's server, and /v1 in process for the model calls. */
    attach(app: { server: Server; inject: Inject }): void {
      inject = (o) => app.inject(o);
      detach = attachBotUpgrades(app.server, { engine, bots: directory, tokens, log: d.log });
      // Firings a stopped coordinator left in flight: their tasks are followed again.
      engine
        .resume()
        .then((n) => n > 0 && d.log.info({ firings: n }, "bots: following the firings in flight"))
        .catch((e) => d.log.error({ err: describeError(e) }, "bots: cannot pick up the firings in flight"));
    },
    async close(): Promise<void> {
      detach?.();
      engine.close();
      await models.close();
    },
  };
}
