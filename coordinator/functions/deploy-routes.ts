import { Type } from "@sinclair/typebox";
import type { FastifyPluginAsync } from "fastify";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import type { DeploymentService } from "../deployments/index.ts";
import { principalOf } from "../http/index.ts";
import { gatewayResponse } from "../http/index.ts";
import { DeploymentBody, deploymentJson } from "../deployments/index.ts";
import { StubConfigSchema, StubExtraSchema } from "./stub-routes.ts";

/** Why no host could ever run a stub of this config and extra; undefined when one could. */
export type PlacementCheck = (stub: { config: StubConfig; extra: StubExtra }) => string | undefined;

/**
 * `berth deploy` and `berth serve`: a new version of a named deployment, or
 * the serve session updated in place. A deployment no host can ever run is
 * still made (the fleet may grow) but answered with a warning that says why.
 */
export function gatewayDeploymentRoutes(
  deployments: DeploymentService,
  neverPlaceable?: PlacementCheck,
): FastifyPluginAsync {
  return async (app) => {
    app.post(
      "/api/v1/gateway/deployments",
      {
        config: { access: { needs: "write", audit: "deployment.deploy" } },
        schema: {
          summary:
            "Deploys a new version of a named deployment (or updates a serve session in place); answers it and its URL",
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
          response: gatewayResponse(
            Type.Object({
              ok: Type.Literal(true),
              deployment: DeploymentBody,
              warnings: Type.Optional(
                Type.Array(Type.String(), {
                  description: "e.g. no host of the fleet can ever run it, and why",
                }),
              ),
            }),
          ),
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
        const why = neverPlaceable?.({ config: b.config, extra: b.extra });
        const warnings = why
          ? [
              `no host of this cluster can ever run ${b.name}'s containers: ${why}; its requests fail until one can`,
            ]
          : [];
        return {
          ok: true as const,
          deployment: deploymentJson(deployments, dep),
          ...(warnings.length > 0 ? { warnings } : {}),
        };
      },
    );
  };
}
