import { type Command, InvalidArgumentError, Option } from "commander";
import { SYSCALL_FILTERS } from "../../api/index.ts";
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
  role: string;
  deployments: string[] | null;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
}

interface LimitsJson {
  workspace_id: string;
  limits: Record<string, number | string | boolean | null> & {
    max_gpus_by_type?: Record<string, number> | null;
  };
  usage: Record<string, number> & { gpus_by_type?: Record<string, number> };
}

/** Limit flags: their API field and how usage names the same thing. */
const LIMIT_FLAGS = [
  { flag: "--max-containers <n>", key: "maxContainers", field: "max_containers", usage: "containers" },
  {
    flag: "--max-cpu-millicores <n>",
    key: "maxCpuMillicores",
    field: "max_cpu_millicores",
    usage: "cpu_millicores",
  },
  { flag: "--max-memory-mb <n>", key: "maxMemoryMb", field: "max_memory_mb", usage: "memory_mb" },
  { flag: "--max-gpus <n>", key: "maxGpus", field: "max_gpus", usage: "gpus" },
  {
    flag: "--max-pending-tasks <n>",
    key: "maxPendingTasks",
    field: "max_pending_tasks",
    usage: "pending_tasks",
  },
  { flag: "--max-queue-items <n>", key: "maxQueueItems", field: "max_queue_items", usage: "queue_items" },
  { flag: "--max-volume-mb <n>", key: "maxVolumeMb", field: "max_volume_mb", usage: "volume_mb" },
  {
    flag: "--gpu-hours-per-month <n>",
    key: "gpuHoursPerMonth",
    field: "gpu_hours_per_month",
    usage: "gpu_hours_this_month",
  },
  {
    flag: "--cpu-hours-per-month <n>",
    key: "cpuHoursPerMonth",
    field: "cpu_hours_per_month",
    usage: "cpu_hours_this_month",
  },
  {
    flag: "--v1-tokens-per-month <n>",
    key: "v1TokensPerMonth",
    field: "v1_tokens_per_month",
    usage: "v1_tokens_this_month",
  },
] as const;

/** A limit value: a whole number, or `none` for no limit. */
function limitValue(v: string): number | null {
  if (/^(none|unlimited)$/i.test(v)) return null;
  if (!/^\d{1,10}$/.test(v))
    throw new InvalidArgumentError(`expected a whole number or "none", got ${JSON.stringify(v)}`);
  return Number(v);
}

/** `--max-gpus-type TYPE=N` (N or none), or `none` for no limit by any type; repeatable. */
function gpuTypeLimit(v: string, all: [string, number | null][] = []): [string, number | null][] {
  if (/^none$/i.test(v)) return [...all, ["", null]];
  const m = /^([^=\s]+)=(.+)$/.exec(v);
  if (!m)
    throw new InvalidArgumentError(
      `expected TYPE=N (e.g. A100=2), TYPE=none or none, got ${JSON.stringify(v)}`,
    );
  return [...all, [m[1] as string, limitValue(m[2] as string)]];
}

/** The per-type limits after the flags' changes, in order, on what is set now. */
function mergeGpuTypeLimits(
  now: Record<string, number> | null | undefined,
  changes: [string, number | null][],
): Record<string, number> | null {
  let out: Record<string, number> = { ...now };
  for (const [type, n] of changes) {
    if (type === "") {
      out = {};
      continue;
    }
    // Types match without regard to case: the flag's spelling replaces the one set.
    for (const k of Object.keys(out)) if (k.toUpperCase() === type.toUpperCase()) delete out[k];
    if (n !== null) out[type] = n;
  }
  return Object.keys(out).length > 0 ? out : null;
}

export function workspaceCommands(program: Command): void {
  const ws = program
    .command("workspace")
    .description("workspaces (creating one needs a cluster admin token)");
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
    .description(
      "show a workspace's limits and usage; with flags, set them (cluster admin token; `none` removes a limit)",
    )
    .argument("<ws>", "workspace external id (berth workspace list)")
    .option("--json", "print JSON");
  for (const f of LIMIT_FLAGS) limits.option(f.flag, `set ${f.field} (a number, or none)`, limitValue);
  limits.option(
    "--max-gpus-type <type=n>",
    "set max_gpus_by_type for one GPU type (A100=2; A100=none removes it; none removes all); repeatable",
    gpuTypeLimit,
  );
  limits.addOption(
    new Option(
      "--isolation <kind>",
      "gvisor: every container of the workspace runs under gVisor, whatever its stub asks; none: each stub's own",
    ).choices(["gvisor", "none"]),
  );
  limits.addOption(
    new Option(
      "--user-namespace <on|off>",
      "off: the workspace's containers run without a user namespace, root inside being the host's root (an opt-out, recorded in the audit trail); on (the default): root inside is an unprivileged host uid",
    ).choices(["on", "off"]),
  );
  limits.addOption(
    new Option(
      "--syscall-filter <filter>",
      "allowlist (the default): system calls not on the allow list are refused; denylist: the older profile, which allows all but a deny list",
    ).choices([...SYSCALL_FILTERS]),
  );
  limits.action(async (wsId: string, o: Record<string, unknown>) => {
    const api = ApiClient.fromEnv();
    const path = `/api/v1/workspace/${encodeURIComponent(wsId)}/limits`;
    const change: Record<string, unknown> = {};
    const byType = o.maxGpusType as [string, number | null][] | undefined;
    if (byType) {
      const now = await api.request<LimitsJson>("GET", path);
      change.max_gpus_by_type = mergeGpuTypeLimits(now.limits.max_gpus_by_type, byType);
    }
    for (const f of LIMIT_FLAGS) if (o[f.key] !== undefined) change[f.field] = o[f.key] as number | null;
    if (o.isolation !== undefined) change.isolation = o.isolation === "none" ? null : (o.isolation as string);
    if (o.userNamespace !== undefined) change.user_namespace = o.userNamespace === "on";
    if (o.syscallFilter !== undefined) change.syscall_filter = o.syscallFilter as string;
    const r =
      Object.keys(change).length > 0
        ? await api.request<LimitsJson>("PUT", path, change)
        : await api.request<LimitsJson>("GET", path);
    if (o.json) return printJson(r);
    printTable(
      [
        ...LIMIT_FLAGS.map((f) => ({
          limit: f.field,
          value: r.limits[f.field] ?? "none",
          in_use: r.usage[f.usage] ?? 0,
        })),
        ...Object.entries(r.limits.max_gpus_by_type ?? {}).map(([type, n]) => ({
          limit: `max_gpus_by_type ${type}`,
          value: n,
          in_use: Object.entries(r.usage.gpus_by_type ?? {})
            .filter(([held]) =>
              [held, held.split(":")[0]].some((t) => t?.toUpperCase() === type.toUpperCase()),
            )
            .reduce((sum, [, c]) => sum + c, 0),
        })),
        { limit: "isolation", value: r.limits.isolation ?? "none", in_use: "" },
        { limit: "user_namespace", value: r.limits.user_namespace === false ? "off" : "on", in_use: "" },
        { limit: "syscall_filter", value: r.limits.syscall_filter ?? "allowlist", in_use: "" },
      ],
      ["limit", "value", "in_use"],
    );
  });

  const tok = program.command("token").description("tokens of the current workspace");
  tok
    .command("create")
    .description("create a token (shown once)")
    .option("--name <name>", "a label for the token")
    .option("--admin", "a cluster admin token (needs one)")
    .addOption(
      new Option(
        "--role <role>",
        "what the token may do (docs/roles.md); at most your own token's role",
      ).choices(["admin", "developer", "runner", "viewer"]),
    )
    .option(
      "--deployment <name>",
      "narrow the token to this deployment (repeat for more): the token a web app embeds",
      (v: string, all: string[] = []) => [...all, v],
    )
    .option("--json", "print JSON")
    .action(
      async (o: { name?: string; admin?: boolean; role?: string; deployment?: string[]; json?: boolean }) => {
        const r = await ApiClient.fromEnv().request<{ token: string; token_info: TokenInfo }>(
          "POST",
          "/api/v1/token",
          {
            ...(o.name ? { name: o.name } : {}),
            ...(o.admin ? { admin: true } : {}),
            ...(o.role ? { role: o.role } : {}),
            ...(o.deployment ? { deployments: o.deployment } : {}),
          },
        );
        if (o.json) return printJson(r);
        const narrowed = r.token_info.deployments ? ` for ${r.token_info.deployments.join(", ")}` : "";
        process.stdout.write(
          `created ${r.token_info.role} token ${r.token_info.id}${narrowed}\ntoken (shown once): ${r.token}\n`,
        );
      },
    );
  tok
    .command("list")
    .description("list tokens (never their secrets)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const r = await ApiClient.fromEnv().request<{ tokens: TokenInfo[] }>("GET", "/api/v1/token");
      if (o.json) return printJson(r.tokens);
      printTable(
        r.tokens.map((t) => ({
          ...t,
          deployments: t.deployments ? t.deployments.join(",") : "all",
          state: t.revoked_at ? "revoked" : "active",
        })),
        ["id", "name", "prefix", "role", "deployments", "admin", "state", "created_at", "last_used_at"],
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

interface AuditRecordJson {
  id: string;
  at: string;
  token: { id: string; name: string; role: string; cluster_admin: boolean };
  client_ip: string;
  user_agent: string;
  action: string;
  route: string;
  object_id: string | null;
  status: number;
  outcome: string;
  error_code: string | null;
}

/** `berth audit`: the current workspace's audit trail, newest first (docs/roles.md; an admin token). */
export function auditCommand(program: Command): void {
  program
    .command("audit")
    .description("the workspace's audit trail: every change, who made it and from where (admin token)")
    .option("--action <action>", "only this action (deployment.delete, secret.update, token.create, ...)")
    .option("--limit <n>", "records per page (1-500)", (v: string) => {
      if (!/^\d{1,3}$/.test(v) || Number(v) < 1 || Number(v) > 500)
        throw new InvalidArgumentError(`expected 1-500, got ${JSON.stringify(v)}`);
      return Number(v);
    })
    .option("--cursor <cursor>", "the next page: next_cursor of the previous one")
    .option("--json", "print JSON (the page, with next_cursor)")
    .action(async (o: { action?: string; limit?: number; cursor?: string; json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
      const q = new URLSearchParams();
      if (o.action) q.set("action", o.action);
      if (o.limit) q.set("limit", String(o.limit));
      if (o.cursor) q.set("cursor", o.cursor);
      const r = await api.request<{ records: AuditRecordJson[]; next_cursor: string | null }>(
        "GET",
        `/api/v1/audit/${encodeURIComponent(ws.external_id)}${q.size > 0 ? `?${q}` : ""}`,
      );
      if (o.json) return printJson(r);
      printTable(
        r.records.map((a) => ({
          at: a.at,
          token: `${a.token.name || a.token.id} (${a.token.cluster_admin ? "cluster admin" : a.token.role})`,
          action: a.action,
          object: a.object_id ?? "",
          outcome: a.error_code ? `${a.outcome} (${a.error_code})` : a.outcome,
          from: a.client_ip,
        })),
        ["at", "token", "action", "object", "outcome", "from"],
      );
      if (r.next_cursor) process.stdout.write(`more: berth audit --cursor ${r.next_cursor}\n`);
    });
}
