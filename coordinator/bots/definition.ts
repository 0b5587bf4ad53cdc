// The bot definition in a bot deployment's extra.bot (shared/bots.ts): its
// schema for the gateway routes (the checks are shared/bots.ts checkBotDefinition).

import { Type } from "@sinclair/typebox";

const MARKER_NAME = "^[A-Za-z_][A-Za-z0-9_]{0,127}$";

export const BotDefinitionSchema = Type.Object({
  model: Type.Union([Type.String({ minLength: 1, maxLength: 128 }), Type.Null()]),
  description: Type.Union([Type.String({ maxLength: 4096 }), Type.Null()]),
  locations: Type.Array(
    Type.Object({ marker: Type.String({ pattern: MARKER_NAME }), expose: Type.Boolean() }),
    {
      maxItems: 256,
    },
  ),
  transitions: Type.Array(
    Type.Object({
      name: Type.String({ pattern: MARKER_NAME }),
      inputs: Type.Record(Type.String(), Type.Integer({ minimum: 1, maximum: 10_000 })),
      outputs: Type.Array(Type.String(), { maxItems: 256 }),
      description: Type.Union([Type.String({ maxLength: 4096 }), Type.Null()]),
      stub_id: Type.String({ minLength: 1 }),
    }),
    { maxItems: 256 },
  ),
});
