// Which bot a session runs: the latest active version of the workspace's bot
// deployment of that name (docs/bots.md), or one by its deployment id (the
// public websocket of a bot deployed with authorized=False).

import type { BotDefinition } from "../../shared/bots.ts";
import { BerthError } from "../../shared/errors.ts";
import type { DeploymentService, Resolved } from "../deployments/index.ts";
import { type BotDirectory, type ResolvedBot, botDefinitionOf } from "./engine.ts";

export class DeployedBots implements BotDirectory {
  constructor(private readonly deployments: Pick<DeploymentService, "resolveByName" | "resolveById">) {}

  async byName(workspaceId: string, name: string, version?: number): Promise<ResolvedBot> {
    return botOf(await this.deployments.resolveByName(workspaceId, name, version), name);
  }

  /** A bot deployment of any workspace, by id; with its workspace. */
  async byId(id: string): Promise<ResolvedBot & { workspaceId: string }> {
    const r = await this.deployments.resolveById(id);
    return { ...botOf(r, id), workspaceId: r.deployment.workspaceId };
  }
}

function botOf(r: Resolved, asked: string): ResolvedBot {
  if (r.deployment.kind !== "bot")
    throw new BerthError("not_found", `bot ${asked} not found (that deployment is a ${r.deployment.kind})`);
  const def: BotDefinition = botDefinitionOf(r.stub.extra);
  return {
    deploymentId: r.deployment.id,
    name: r.deployment.name,
    authorized: r.stub.config.authorized !== false,
    def,
  };
}
