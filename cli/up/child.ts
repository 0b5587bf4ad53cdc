import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

// How a child `berth` starts: from the sources, cli/main.ts through tsx; from
// the bundle (dist/cli/, every chunk beside the entry), the bundle's entry.
const CHILD_ARGS = import.meta.url.endsWith(".ts")
  ? ["--import", "tsx", fileURLToPath(new URL("../main.ts", import.meta.url))]
  : [fileURLToPath(new URL("./berth.js", import.meta.url))];

/** Formats a pino JSON line for a terminal; other lines pass through. */
export function formatLogLine(name: string, line: string): string {
  let rec: Record<string, unknown>;
  try {
    rec = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return `[${name}] ${line}`;
  }
  if (typeof rec !== "object" || rec === null || !("msg" in rec)) return `[${name}] ${line}`;
  const time = typeof rec.time === "number" ? new Date(rec.time).toISOString().slice(11, 19) : "";
  const level = (
    { 10: "trace", 20: "debug", 30: "info", 40: "WARN", 50: "ERROR", 60: "FATAL" } as Record<string, string>
  )[String(rec.level)];
  const skip = new Set(["msg", "time", "level", "pid", "hostname", "area"]);
  const extras = Object.entries(rec)
    .filter(([k]) => !skip.has(k))
    .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(" ");
  return `${time} [${name}] ${level && level !== "info" ? `${level} ` : ""}${rec.msg}${extras ? `  ${extras}` : ""}`;
}

export interface ManagedChild {
  name: string;
  process: ChildProcess;
  exited: Promise<number | null>;
  stop(graceMs?: number): Promise<void>;
}

/** Runs `berth <args>` as a child with its output prefixed by `name`. */
export function spawnBerth(name: string, args: string[], out: (line: string) => void): ManagedChild {
  const child = spawn(process.execPath, [...CHILD_ARGS, ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, BERTH_UNDER_UP: "1" },
  });
  for (const stream of [child.stdout, child.stderr]) {
    if (stream) createInterface({ input: stream }).on("line", (l) => out(formatLogLine(name, l)));
  }
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  return {
    name,
    process: child,
    exited,
    async stop(graceMs = 15_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(t);
    },
  };
}
