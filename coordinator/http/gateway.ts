import { type TSchema, Type } from "@sinclair/typebox";
import type { FastifyInstance } from "fastify";
import { publicError } from "./public-error.ts";

// Gateway routes (the SDK's) answer HTTP 200 with {ok: false, error} on
// failure, per the spec; only a missing or bad token keeps its 401.

export const GatewayFailure = Type.Object({
  ok: Type.Literal(false),
  error: Type.Object({
    code: Type.String({ description: "stable code from the error catalog" }),
    message: Type.String(),
    details: Type.Optional(Type.Record(Type.String(), Type.Unknown())),
  }),
});

/** The 200 schema of a gateway route: its success shape (with ok: true) or the failure shape. */
export function gatewayResponse<T extends TSchema>(success: T) {
  return { 200: Type.Union([success, GatewayFailure]), 401: GatewayFailure };
}

/** Installs the gateway error convention on an (encapsulated) plugin. */
export function installGatewayErrors(app: FastifyInstance): void {
  app.setErrorHandler((err, req, reply) => {
    const pe = publicError(err, { shape: "gateway", log: req.log, what: "gateway request failed" });
    reply.status(pe.status).headers(pe.headers).send(pe.body);
  });
}
