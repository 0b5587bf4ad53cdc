// Bots (docs/bots.md): the session engine, the deployed bots it resolves,
// the websocket route and the model calls of transitions (op model.chat of
// the agents' relay, answered in process). createBots (area.ts) builds the area.

export { botsHttpRoutes, createBots } from "./area.ts";
export type { BotsDeps } from "./area.ts";
export { BotEngine } from "./engine.ts";
export { BotModelCalls } from "./model-calls.ts";
export { BotDefinitionSchema } from "./definition.ts";
export { botRoutes } from "./routes.ts";
export { BotSessionRepo } from "./store.ts";
