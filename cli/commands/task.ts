import type { Command } from "commander";
import { BerthError, CATALOG, type ErrorCode } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";
import { printJson, printTable } from "../output.ts";

interface TaskJson {
  id: string;
  status: string;
  container_id: string;
  created_at: string;
  started_at: string | null;
  ended_at: string | null;
  updated_at: string;
  stats: { active_containers: number; queue_depth: number };
  stub: { id: string; name: string; type: string; config_version: number };
  /** Why a PENDING/RETRY task waits; null otherwise (absent from older coordinators). */
  waiting?: {
    kind: string;
    message: string;
    position: number;
    ahead: number;
    waiting: number;
    containers: number;
    since?: string;
  } | null;
  history: {
    status: string;
    attempt: number;
    container_id: string | null;
    reason: string | null;
    at: string;
  }[];
}

interface GatewayAnswer {
  ok: boolean;
  error?: { code: string; message: string };
}

/** Gateway routes answer 200 with ok:false; turn that into the error it is. */
function gatewayResult<T extends GatewayAnswer>(r: T): T {
  if (r.ok) return r;
  const code = (r.error?.code && r.error.code in CATALOG ? r.error.code : "internal") as ErrorCode;
  throw new BerthError(code, r.error?.message ?? "the request failed");
}

export function taskCommands(program: Command): void {
  const task = program.command("task").description("tasks of the current workspace");
  task
    .command("get")
    .description("show a task: status, timestamps and its status history")
    .argument("<id>", "task id (task-...)")
    .option("--json", "print JSON")
    .action(async (id: string, o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
      const t = await api.request<TaskJson>(
        "GET",
        `/api/v1/task/${encodeURIComponent(ws.external_id)}/${encodeURIComponent(id)}`,
      );
      if (o.json) return printJson(t);
      const out = process.stdout;
      out.write(`task       ${t.id}\n`);
      out.write(`status     ${t.status}\n`);
      out.write(
        `stub       ${t.stub.name} (${t.stub.type}, ${t.stub.id}, config v${t.stub.config_version})\n`,
      );
      out.write(`container  ${t.container_id || "-"}\n`);
      out.write(`created    ${t.created_at}\n`);
      out.write(`started    ${t.started_at ?? "-"}\n`);
      out.write(`ended      ${t.ended_at ?? "-"}\n`);
      out.write(`queue      ${t.stats.queue_depth} waiting, ${t.stats.active_containers} containers\n`);
      if (t.waiting) {
        const w = t.waiting;
        out.write(`place      ${w.position} of ${w.waiting} waiting (${w.ahead} ahead)\n`);
        out.write(`waiting    ${w.kind}: ${w.message}${w.since ? ` (since ${w.since})` : ""}\n`);
      }
      out.write("\nhistory:\n");
      printTable(
        t.history.map((h) => ({ ...h })),
        ["at", "status", "attempt", "container_id", "reason"],
      );
    });
  task
    .command("cancel")
    .description("cancel a task that has not ended")
    .argument("<id>", "task id (task-...)")
    .action(async (id: string) => {
      const r = gatewayResult(
        await ApiClient.fromEnv().request<GatewayAnswer & { task_id: string; status: string }>(
          "POST",
          `/api/v1/gateway/tasks/${encodeURIComponent(id)}/cancel`,
        ),
      );
      process.stdout.write(
        r.status === "CANCELLED"
          ? `cancelled ${r.task_id}\n`
          : `${r.task_id} had already ended: ${r.status}\n`,
      );
    });
}
