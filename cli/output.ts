/** Prints rows as an aligned table, or JSON when asked. */
export function printTable(rows: Record<string, unknown>[], columns: string[], out = process.stdout): void {
  const cells = rows.map((r) =>
    columns.map((c) => (r[c] === null || r[c] === undefined ? "-" : String(r[c]))),
  );
  const widths = columns.map((c, i) => Math.max(c.length, ...cells.map((row) => row[i]?.length ?? 0)));
  const line = (vals: string[]) =>
    vals
      .map((v, i) => v.padEnd(widths[i] ?? 0))
      .join("  ")
      .trimEnd();
  out.write(`${line(columns.map((c) => c.toUpperCase()))}\n`);
  for (const row of cells) out.write(`${line(row)}\n`);
}

export function printJson(value: unknown, out = process.stdout): void {
  out.write(`${JSON.stringify(value, null, 2)}\n`);
}

export function formatBytes(n: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v >= 10 || i === 0 ? Math.round(v) : v.toFixed(1)} ${units[i]}`;
}
