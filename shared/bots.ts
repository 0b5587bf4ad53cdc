// A deployed bot's definition (docs/bots.md): what `berth deploy app.py:bot`
// registers in its stub's extra.bot. Marker types are known by their class
// names; each transition runs as a task of its own function stub.

import { invalid } from "./errors.ts";

export interface BotLocationDef {
  /** The marker type's name (its class name). */
  marker: string;
  /** false: the session's user does not see this location's markers. */
  expose: boolean;
}

export interface BotTransitionDef {
  name: string;
  /** Marker type name -> how many markers one firing takes. */
  inputs: Record<string, number>;
  /** Marker type names the handler may return. */
  outputs: string[];
  description: string | null;
  /** The function stub that runs the handler. */
  stub_id: string;
}

export interface BotDefinition {
  /** A model name on /v1 (docs/inference.md) the handlers prompt; null: none. */
  model: string | null;
  description: string | null;
  locations: BotLocationDef[];
  transitions: BotTransitionDef[];
}

/** Refuses a definition whose transitions name missing locations, or names given twice. */
export function checkBotDefinition(def: BotDefinition | undefined): asserts def is BotDefinition {
  if (!def)
    throw invalid("a bot deployment needs extra.bot, its definition (berth.client.describe writes it)");
  const locations = new Set<string>();
  for (const l of def.locations) {
    if (locations.has(l.marker)) throw invalid(`the bot has two locations for the marker type ${l.marker}`);
    locations.add(l.marker);
  }
  if (locations.size === 0) throw invalid("the bot has no locations: add BotLocation(marker=...)");
  if (def.transitions.length === 0) throw invalid("the bot has no transitions: add one with @bot.transition");
  const names = new Set<string>();
  for (const t of def.transitions) {
    if (names.has(t.name)) throw invalid(`the bot has two transitions named ${t.name}`);
    names.add(t.name);
    const inputs = Object.keys(t.inputs);
    if (inputs.length === 0) throw invalid(`transition ${t.name} takes no inputs`);
    for (const m of [...inputs, ...t.outputs])
      if (!locations.has(m))
        throw invalid(`transition ${t.name} names the marker type ${m}, which has no location in the bot`);
  }
}
