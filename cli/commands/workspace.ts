import type { Command } from "commander";
import { ApiClient } from "../api-client.ts";
import { printJson, printTable } from "../output.ts";

interface WorkspaceJson {
  external_id: string;
  name: string;
  created_at: string;
}
interface TokenInfo {
  id: string;
  name: string;
  prefix: string;
  admin: boolean;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

export function workspaceCommands(program: Command): void {
  const ws = program.command("workspace").description("workspaces (creating one needs an admin token)");
  ws.command("current")
    .description("show the token's workspace")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const w = await ApiClient.fromEnv().request<WorkspaceJson>("GET", "/api/v1/workspace/current");
      if (o.json) printJson(w);
      else printTable([w as unknown as Record<string, unknown>], ["external_id", "name", "created_at"]);
    });
  ws.command("create")
    .description("create a workspace and its first token (shown once)")
    .argument("<name>", "workspace name")
    .option("--json", "print JSON")
    .action(async (name: string, o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ workspace: WorkspaceJson; token: string }>(
        "POST",
        "/api/v1/workspace",
        { name },
      );
      if (o.json) return printJson(r);
      process.stdout.write(
        `created workspace ${r.workspace.name} (${r.workspace.external_id})\ntoken (shown once): ${r.token}\n`,
      );
    });
  ws.command("list")
    .description("list all workspaces")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ workspaces: WorkspaceJson[] }>(
        "GET",
        "/api/v1/workspace",
      );
      if (o.json) printJson(r.workspaces);
      else
        printTable(r.workspaces as unknown as Record<string, unknown>[], [
          "external_id",
          "name",
          "created_at",
        ]);
    });

  const tok = program.command("token").description("tokens of the current workspace");
  tok
    .command("create")
    .description("create a token (shown once)")
    .option("--name <name>", "a label for the token")
    .option("--admin", "an operator token (needs an admin token)")
    .option("--json", "print JSON")
    .action(async (o: { name?: string; admin?: boolean; json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ token: string; token_info: TokenInfo }>(
        "POST",
        "/api/v1/token",
        {
          ...(o.name ? { name: o.name } : {}),
          ...(o.admin ? { admin: true } : {}),
        },
      );
      if (o.json) return printJson(r);
      process.stdout.write(`created token ${r.token_info.id}\ntoken (shown once): ${r.token}\n`);
    });
  tok
    .command("list")
    .description("list tokens (never their secrets)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ tokens: TokenInfo[] }>("GET", "/api/v1/token");
      if (o.json) return printJson(r.tokens);
      printTable(
        r.tokens.map((t) => ({ ...t, state: t.revoked_at ? "revoked" : "active" })),
        ["id", "name", "prefix", "admin", "state", "created_at", "last_used_at"],
      );
    });
  tok
    .command("revoke")
    .description("revoke a token")
    .argument("<id>", "token id (tok-...)")
    .action(async (id: string) => {
      await ApiClient.fromEnv().request("DELETE", `/api/v1/token/${encodeURIComponent(id)}`);
      process.stdout.write(`revoked ${id}\n`);
    });
}
