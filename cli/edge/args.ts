// Parsing of the edge commands' flags into API values. Every function throws
// an invalid_request BerthError naming the flag and the bad value.

import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { BerthError } from "../../shared/errors.ts";

const invalid = (message: string) => new BerthError("invalid_request", message);

const BINARY: Record<string, number> = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40 };
const DECIMAL: Record<string, number> = { B: 1, K: 1e3, M: 1e6, G: 1e9, T: 1e12 };

/**
 * A memory size: `64Mi`, `2Gi`, `1.5Gi` (binary), `512M`, `2G` (decimal,
 * as Kubernetes reads them), `100B` (bytes); a plain number is MiB.
 */
export function parseMemory(text: string, flag = "--memory"): number {
  const m = /^(\d+(?:\.\d+)?)([A-Za-z]*)$/.exec(text.trim());
  if (!m) throw invalid(`${flag} ${JSON.stringify(text)} is not a size like 64Mi, 2Gi, 512M or 128 (MiB)`);
  const [, num = "", unit = ""] = m;
  const scale = unit === "" ? BINARY.Mi : (BINARY[unit] ?? DECIMAL[unit]);
  if (scale === undefined) {
    throw invalid(
      `${flag} ${JSON.stringify(text)} has an unknown unit "${unit}": use Ki, Mi, Gi, Ti (powers of 1024), ` +
        "K, M, G, T (powers of 1000) or B, or a plain number of MiB",
    );
  }
  const bytes = Math.floor(Number(num) * scale!);
  if (!(bytes > 0)) throw invalid(`${flag} ${JSON.stringify(text)} must be more than zero`);
  if (!Number.isSafeInteger(bytes)) throw invalid(`${flag} ${JSON.stringify(text)} is too large`);
  return bytes;
}

/** A positive number of CPU cores, fractions allowed. */
export function parseCpu(text: string): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n) || n <= 0) {
    throw invalid(`--cpu ${JSON.stringify(text)} must be a positive number of cores, e.g. 0.5 or 2`);
  }
  return n;
}

export function parsePositiveInt(text: string, flag: string): number {
  if (!/^\d+$/.test(text.trim()) || Number(text) <= 0 || !Number.isSafeInteger(Number(text))) {
    throw invalid(`${flag} ${JSON.stringify(text)} must be a positive whole number`);
  }
  return Number(text);
}

export function parseNonNegativeInt(text: string, flag: string): number {
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(Number(text))) {
    throw invalid(`${flag} ${JSON.stringify(text)} must be a whole number, 0 or more`);
  }
  return Number(text);
}

/** Seconds (fractions allowed) as whole milliseconds. */
export function parseSecondsMs(text: string, flag: string, opts: { allowZero?: boolean } = {}): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n) || n < 0 || (n === 0 && !opts.allowZero)) {
    throw invalid(
      `${flag} ${JSON.stringify(text)} must be a ${opts.allowZero ? "non-negative" : "positive"} number of seconds`,
    );
  }
  return Math.round(n * 1000);
}

export function parsePort(text: string): number {
  if (!/^\d{1,5}$/.test(text.trim()) || Number(text) < 1 || Number(text) > 65535) {
    throw invalid(`--port ${JSON.stringify(text)} must be a TCP port, 1..65535`);
  }
  return Number(text);
}

/** `KEY=VALUE` (the value may be empty and may contain "="). */
export function parseKeyValue(text: string, flag: string): [string, string] {
  const eq = text.indexOf("=");
  if (eq <= 0) throw invalid(`${flag} ${JSON.stringify(text)} must be KEY=VALUE`);
  return [text.slice(0, eq), text.slice(eq + 1)];
}

/** Folds repeated `KEY=VALUE` flags into a record; a repeated key is an error. */
export function keyValues(list: readonly string[], flag: string): Record<string, string> | undefined {
  if (list.length === 0) return undefined;
  const out: Record<string, string> = {};
  for (const item of list) {
    const [k, v] = parseKeyValue(item, flag);
    if (Object.hasOwn(out, k)) throw invalid(`${flag} ${k} is given twice`);
    out[k] = v;
  }
  return out;
}

/** `H100,A100` → ["H100", "A100"]; empty entries refused. */
export function parseGpuTypes(text: string): string[] {
  const types = text.split(",").map((s) => s.trim());
  if (types.some((t) => !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(t))) {
    throw invalid(
      `--gpu-type ${JSON.stringify(text)} must be a comma-separated list of GPU types, e.g. H100,A100`,
    );
  }
  return types;
}

/** Commander accumulator for repeatable flags. */
export const collect = (value: string, previous: string[] = []): string[] => [...previous, value];

export const DEFAULT_AGENT_SOCKET = "/var/lib/berth-agent/agent.sock";

/**
 * Where the local agent listens: `--socket`, else the socket in an explicitly
 * given `--data-dir`, else `$BERTH_AGENT_SOCKET`, else the socket of the
 * agent `berth up` runs (`upSocket`, saved in the CLI profile) when it exists,
 * else the default location (a systemd-installed agent's), else `upSocket`
 * (so the error names the socket `berth up` would have made).
 * A relative path is taken from the working directory.
 */
export function resolveAgentSocket(o: {
  socket?: string;
  dataDir?: string;
  env?: NodeJS.ProcessEnv;
  upSocket?: string;
  exists?: (path: string) => boolean;
}): string {
  const chosen =
    o.socket ??
    (o.dataDir ? `${o.dataDir.replace(/\/+$/, "")}/agent.sock` : undefined) ??
    o.env?.BERTH_AGENT_SOCKET;
  if (chosen) return resolve(chosen);
  if (!o.upSocket) return DEFAULT_AGENT_SOCKET;
  const exists = o.exists ?? existsSync;
  if (exists(o.upSocket) || !exists(DEFAULT_AGENT_SOCKET)) return resolve(o.upSocket);
  return DEFAULT_AGENT_SOCKET;
}
