// A usage report as CSV (RFC 4180): one line per row, the keys first, one
// column per GPU type seen in the report. Spreadsheets and billing tools
// read it as it is.

import type { UsageReport } from "./report.ts";

/** A field quoted when it holds a comma, a quote or a line break. */
export function csvField(v: string | number): string {
  const s = String(v);
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

export function usageCsv(r: UsageReport): string {
  const gpuTypes = [...new Set(r.rows.flatMap((row) => Object.keys(row.usage.gpu_seconds_by_type)))].sort();
  const header = [
    ...(r.by.includes("day") ? ["day"] : []),
    ...(r.by.includes("deployment") ? ["deployment"] : []),
    ...(r.by.includes("member") ? ["member_id", "member_name"] : []),
    "tasks",
    "sandboxes",
    "run_seconds",
    "cpu_seconds",
    "memory_gib_seconds",
    "gpu_seconds",
    ...gpuTypes.map((t) => `gpu_seconds_${t}`),
    "inference_requests",
    "prompt_tokens",
    "completion_tokens",
    "total_tokens",
  ];
  const lines = [header.map(csvField).join(",")];
  for (const row of r.rows) {
    const u = row.usage;
    const cells: (string | number)[] = [
      ...(r.by.includes("day") ? [row.day ?? ""] : []),
      ...(r.by.includes("deployment") ? [row.deployment ?? ""] : []),
      ...(r.by.includes("member") ? [row.member?.id ?? "", row.member?.name ?? ""] : []),
      u.tasks,
      u.sandboxes,
      u.run_seconds,
      u.cpu_seconds,
      u.memory_gib_seconds,
      u.gpu_seconds,
      ...gpuTypes.map((t) => u.gpu_seconds_by_type[t] ?? 0),
      u.inference_requests,
      u.prompt_tokens,
      u.completion_tokens,
      u.total_tokens,
    ];
    lines.push(cells.map(csvField).join(","));
  }
  return `${lines.join("\r\n")}\r\n`;
}
