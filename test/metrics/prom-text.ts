// A reader of the Prometheus text exposition format, enough for the tests:
// `name{label="value",...} number` lines; comments and blanks are skipped.

export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseProm(text: string): PromSample[] {
  const out: PromSample[] = [];
  for (const [n, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const m = LINE.exec(line);
    if (!m) throw new Error(`line ${n + 1} is not a Prometheus sample: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? "").matchAll(LABEL))
      labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, "$1");
    const value =
      m[3] === "+Inf" ? Number.POSITIVE_INFINITY : m[3] === "-Inf" ? Number.NEGATIVE_INFINITY : Number(m[3]);
    if (Number.isNaN(value) && m[3] !== "NaN")
      throw new Error(`line ${n + 1}: value ${m[3]} is not a number`);
    out.push({ name: m[1] as string, labels, value });
  }
  return out;
}
