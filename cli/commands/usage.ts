import { type Command, InvalidArgumentError } from "commander";
import { ApiClient } from "../api-client.ts";
import { printJson, printTable } from "../output.ts";
import { USAGE_DIMENSIONS, type UsageFigures as Figures, type UsageReport } from "../../shared/usage.ts";

const byList = (v: string): string => {
  for (const d of v.split(",")) {
    if (!(USAGE_DIMENSIONS as readonly string[]).includes(d.trim()))
      throw new InvalidArgumentError(
        `expected day, deployment or member (comma-separated), got ${JSON.stringify(d)}`,
      );
  }
  return v;
};

const gpus = (f: Figures) =>
  Object.entries(f.gpu_seconds_by_type)
    .map(([t, s]) => `${t}=${s}`)
    .join(" ");

const cells = (f: Figures) => ({
  tasks: f.tasks + f.sandboxes,
  run_s: f.run_seconds,
  cpu_s: f.cpu_seconds,
  mem_gib_s: f.memory_gib_seconds,
  gpu_s: f.gpu_seconds,
  gpu_by_type: gpus(f),
  tokens: f.total_tokens,
});

/** `berth usage`: the current workspace's usage for chargeback (docs/usage.md). */
export function usageCommand(program: Command): void {
  program
    .command("usage")
    .description(
      "the workspace's usage: GPU, CPU and memory seconds and /v1 tokens, by day, deployment or member",
    )
    .option(
      "--from <date>",
      "YYYY-MM-DD or an ISO 8601 time with a zone (default: the first of this month, UTC)",
    )
    .option("--to <date>", "a date includes that day; a time is exclusive (default: now)")
    .option("--by <dims>", "day, deployment, member, or several comma-separated", byList, "day")
    .option("--csv", "print CSV (for spreadsheets and billing tools)")
    .option("--json", "print JSON")
    .action(async (o: { from?: string; to?: string; by: string; csv?: boolean; json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
      const q = new URLSearchParams({ by: o.by });
      if (o.from) q.set("from", o.from);
      if (o.to) q.set("to", o.to);
      const path = `/api/v1/usage/${encodeURIComponent(ws.external_id)}/report`;
      if (o.csv) {
        q.set("format", "csv");
        process.stdout.write(await (await api.download(`${path}?${q}`)).text());
        return;
      }
      const r = await api.request<UsageReport>("GET", `${path}?${q}`);
      if (o.json) return printJson(r);
      const keys = [
        ...(r.by.includes("day") ? ["day"] : []),
        ...(r.by.includes("deployment") ? ["deployment"] : []),
        ...(r.by.includes("member") ? ["member"] : []),
      ];
      const rows: Record<string, unknown>[] = r.rows.map((row) => ({
        day: row.day,
        deployment: row.deployment ?? "-",
        member: row.member ? row.member.name || row.member.id : "-",
        ...cells(row.usage),
      }));
      rows.push({ [keys[0] ?? "day"]: "total", ...cells(r.totals) });
      process.stdout.write(`usage from ${r.from} to ${r.to}\n`);
      printTable(rows, [...keys, "tasks", "run_s", "cpu_s", "mem_gib_s", "gpu_s", "gpu_by_type", "tokens"]);
    });
}
