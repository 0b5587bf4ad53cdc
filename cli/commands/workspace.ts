import { type Command, InvalidArgumentError } from "commander";
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

interface LimitsJson {
  workspace_id: string;
  limits: Record<string, number | null>;
  usage: Record<string, number>;
}

/** Limit flags: their API field and how usage names the same thing. */
const LIMIT_FLAGS = [
  { flag: "--max-containers <n>", key: "maxContainers", field: "max_containers", usage: "containers" },
  { flag: "--max-cpu-millicores <n>", key: "maxCpuMillicores", field: "max_cpu_millicores", usage: "cpu_millicores" },
  { flag: "--max-memory-mb <n>", key: "maxMemoryMb", field: "max_memory_mb", usage: "memory_mb" },
  { flag: "--max-gpus <n>", key: "maxGpus", field: "max_gpus", usage: "gpus" },
  { flag: "--max-pending-tasks <n>", key: "maxPendingTasks", field: "max_pending_tasks", usage: "pending_tasks" },
  { flag: "--max-queue-items <n>", key: "maxQueueItems", field: "max_queue_items", usage: "queue_items" },
  { flag: "--max-volume-mb <n>", key: "maxVolumeMb", field: "max_volume_mb", usage: "volume_mb" },
] as const;

/** A limit value: a whole number, or `none` for no limit. */
function limitValue(v: string): number | null {
  if (/^(none|unlimited)$/i.test(v)) return null;
  if (!/^\d{1,10}$/.test(v)) throw new InvalidArgumentError(`expected a whole number or "none", got ${JSON.stringify(v)}`);
  return Number(v);
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

  const limits = ws
    .command("limits")
    .description("show a workspace's limits and usage; with flags, set them (admin token; `none` removes a limit)")
    .argument("<ws>", "workspace external id (berth workspace list)")
    .option("--json", "print JSON");
  for (const f of LIMIT_FLAGS) limits.option(f.flag, `set ${f.field} (a number, or none)`, limitValue);
  limits.action(async (wsId: string, o: Record<string, number | null | boolean | undefined>) => {
    const api = ApiClient.fromEnv();
    const path = `/api/v1/workspace/${encodeURIComponent(wsId)}/limits`;
    const change: Record<string, number | null> = {};
    for (const f of LIMIT_FLAGS) if (o[f.key] !== undefined) change[f.field] = o[f.key] as number | null;
    const r =
      Object.keys(change).length > 0
        ? await api.request<LimitsJson>("PUT", path, change)
        : await api.request<LimitsJson>("GET", path);
    if (o.json) return printJson(r);
    printTable(
      LIMIT_FLAGS.map((f) => ({ limit: f.field, value: r.limits[f.field] ?? "none", in_use: r.usage[f.usage] ?? 0 })),
      ["limit", "value", "in_use"],
    );
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
