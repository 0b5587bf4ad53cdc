import { existsSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

// Shared by every benchmark under bench/: summary statistics over latency
// samples, a plain-text table and the JSON result file.

export interface Summary {
  n: number;
  min: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

/**
 * The p-th percentile (0..100) of already sorted samples, interpolating
 * linearly between the two nearest ranks (numpy's default), so small sample
 * counts do not snap p95 to the maximum.
 */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  if (!(p >= 0 && p <= 100)) throw new RangeError(`percentile ${p} is outside 0..100`);
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  const a = sorted[lo]!;
  const b = sorted[hi]!;
  return a + (b - a) * (rank - lo);
}

export function mean(samples: readonly number[]): number {
  if (samples.length === 0) return Number.NaN;
  let sum = 0;
  for (const s of samples) sum += s;
  return sum / samples.length;
}

export function summarize(samples: readonly number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: sorted.length,
    min: sorted[0] ?? Number.NaN,
    p50: percentile(sorted, 50),
    p95: percentile(sorted, 95),
    p99: percentile(sorted, 99),
    max: sorted[sorted.length - 1] ?? Number.NaN,
    mean: mean(sorted),
  };
}

/** "12.3" for milliseconds; "-" when there is no value. */
export function fmtMs(ms: number | undefined): string {
  return ms === undefined || Number.isNaN(ms) ? "-" : ms.toFixed(1);
}

/** "1.23x" for value/reference; "-" when either is missing. */
export function fmtRatio(value: number | undefined, reference: number | undefined): string {
  if (value === undefined || reference === undefined || Number.isNaN(value) || Number.isNaN(reference)) {
    return "-";
  }
  if (reference === 0) return "-";
  return `${(value / reference).toFixed(2)}x`;
}

/**
 * A Markdown table (pipes and a separator row), so the same text reads in a
 * terminal and pastes into bench/README.md. Cells that are numbers-like are
 * right-aligned.
 */
export function formatTable(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const numeric = header.map((_, i) => rows.length > 0 && rows.every((r) => /^[-\d.x]*$/.test(r[i] ?? "")));
  const cell = (text: string, i: number) =>
    numeric[i] ? text.padStart(widths[i]!) : text.padEnd(widths[i]!);
  const line = (cells: readonly string[]) =>
    `| ${header.map((_, i) => cell(cells[i] ?? "", i)).join(" | ")} |`;
  const sep = `|${widths.map((w, i) => (numeric[i] ? `${"-".repeat(w + 1)}:` : "-".repeat(w + 2))).join("|")}|`;
  return [line(header), sep, ...rows.map(line)].join("\n");
}

/** bench/results, next to this lib directory. */
export const RESULTS_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "results");

/**
 * Writes `<dir>/<name>-<YYYY-MM-DD>.json` (UTC date) and returns its path. A
 * rerun on the same day gets `-2`, `-3`, … after the date: results that
 * bench/README.md cites are never replaced by a later run.
 */
export function writeResults(name: string, data: unknown, opts: { dir?: string; date?: Date } = {}): string {
  if (!/^[a-z0-9][a-z0-9-]*$/.test(name))
    throw new Error(`benchmark name ${JSON.stringify(name)} is not a-z0-9-`);
  const dir = opts.dir ?? RESULTS_DIR;
  mkdirSync(dir, { recursive: true });
  const day = (opts.date ?? new Date()).toISOString().slice(0, 10);
  let path = join(dir, `${name}-${day}.json`);
  for (let n = 2; existsSync(path); n++) path = join(dir, `${name}-${day}-${n}.json`);
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, `${compactJson(data)}\n`);
  // Rename so an interrupted run never leaves half a JSON file behind.
  renameSync(tmp, path);
  return path;
}

/** Indented JSON, except that arrays of numbers (the raw samples) stay on one line. */
export function compactJson(data: unknown): string {
  return JSON.stringify(data, null, 2).replace(
    /\[\s+(-?[\d.e+-]+(?:,\s+-?[\d.e+-]+)*)\s+\]/g,
    (_, inner: string) => `[${inner.split(/,\s+/).join(", ")}]`,
  );
}
