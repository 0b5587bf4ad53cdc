import type { Command } from "commander";
import { ApiClient } from "../api-client.ts";
import { DeploymentRoutes } from "../deploy/rest.ts";
import { printJson, printTable } from "../output.ts";

export function deploymentCommands(program: Command): void {
  const deployment = program.command("deployment").description("deployments of the current workspace");
  deployment
    .command("list")
    .description("list deployments, newest first")
    .option("--name <name>", "only the versions of this name")
    .option("--json", "print JSON")
    .action(async (o: { name?: string; json?: boolean }) => {
      const list = await new DeploymentRoutes(ApiClient.fromEnv()).list(o.name);
      if (o.json) return printJson(list);
      printTable(
        list.map((d) => ({
          id: d.id,
          name: d.name,
          version: d.version,
          kind: d.type,
          active: d.active ? "yes" : "no",
          url: d.url || null,
          created: d.created_at,
        })),
        ["id", "name", "version", "kind", "active", "url", "created"],
      );
    });
  deployment
    .command("stop")
    .description("stop a deployment: its containers stop and calls to it answer 409; the record stays")
    .argument("<id>", "deployment id (dep_...)")
    .action(async (id: string) => {
      const d = await new DeploymentRoutes(ApiClient.fromEnv()).stop(id);
      process.stdout.write(`stopped ${d.name} version ${d.version} (${d.id})\n`);
    });
  deployment
    .command("start")
    .description("start a stopped deployment again")
    .argument("<id>", "deployment id (dep_...)")
    .action(async (id: string) => {
      const d = await new DeploymentRoutes(ApiClient.fromEnv()).start(id);
      process.stdout.write(`started ${d.name} version ${d.version} (${d.id})\n`);
    });
  deployment
    .command("delete")
    .description("delete a deployment's record and stop it")
    .argument("<id>", "deployment id (dep_...)")
    .action(async (id: string) => {
      await new DeploymentRoutes(ApiClient.fromEnv()).delete(id);
      process.stdout.write(`deleted ${id}\n`);
    });
}
