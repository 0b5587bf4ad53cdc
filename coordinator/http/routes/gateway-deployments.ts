import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import type { StubConfig, StubExtra } from "../../../shared/tasks.ts";
import type { DeploymentService } from "../../deployments/service.ts";
import { principalOf } from "../auth.ts";
import { gatewayResponse } from "../gateway.ts";
import { DeploymentBody, deploymentJson } from "./deployments.ts";
import { StubConfigSchema, StubExtraSchema } from "./gateway-stubs.ts";

/** `berth deploy` and `berth serve`: a new version of a named deployment, or the serve session updated in place. */
export function gatewayDeploymentRoutes(
  deployments: DeploymentService,
): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/gateway/deployments",
      {
        schema: {
          body: Type.Object(
            {
              // Name and type are checked by the service, whose messages say what is wrong.
              name: Type.String(),
              type: Type.String({
                description: "the kind: endpoint, asgi, realtime, taskqueue, schedule or function",
              }),
              config: StubConfigSchema,
              extra: StubExtraSchema,
              serve: Type.Optional(Type.Boolean()),
            },
            { additionalProperties: false },
          ),
          response: gatewayResponse(Type.Object({ ok: Type.Literal(true), deployment: DeploymentBody })),
        },
      },
      async (req) => {
        const b = req.body as {
          name: string;
          type: string;
          config: StubConfig;
          extra: StubExtra;
          serve?: boolean;
        };
        const dep = await deployments.deploy(principalOf(req).workspace.id, {
          name: b.name,
          kind: b.type,
          config: b.config,
          extra: b.extra,
          serve: b.serve === true,
        });
        return { ok: true as const, deployment: deploymentJson(deployments, dep) };
      },
    );
  };
}
