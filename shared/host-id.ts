// Which machine a process runs on. Agents report it in their heartbeat; a
// coordinator that finds its own id there is on the agent's host and can reach
// the agent's containers' exposed ports without the TLS tunnel.

import { createHmac, randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { BerthError, describeError } from "./errors.ts";

/** The fallback id's file in a data dir. */
export const HOST_ID_FILE = "host-id";

/** What systemd puts in /etc/machine-id before first boot completes; not an id. */
const NOT_AN_ID = new Set(["", "uninitialized"]);

/**
 * machine-id(5) is confidential and must not go on the network as is; what
 * berth reports is this application-specific keyed hash of it.
 */
const MACHINE_ID_KEY = "berth host id v1";

/**
 * The host's id: a keyed hash of the first of `machineIdPaths` holding a
 * machine id (trimmed), the same for every berth process on the host, else a
 * random id written once to `{dataDirFallback}/host-id` (0600) and read back
 * on later calls. Two processes with different data dirs on a host without a
 * machine id get different ids, which only costs them the same-host shortcut.
 */
export function readHostId(
  dataDirFallback: string,
  machineIdPaths: readonly string[] = ["/etc/machine-id"],
): string {
  for (const path of machineIdPaths) {
    const id = readTrimmed(path);
    if (id !== undefined && !NOT_AN_ID.has(id)) return hashMachineId(id);
  }
  const file = join(dataDirFallback, HOST_ID_FILE);
  const existing = readTrimmed(file);
  if (existing) return existing;
  const id = randomBytes(16).toString("hex");
  try {
    mkdirSync(dataDirFallback, { recursive: true, mode: 0o700 });
    // "wx": when another process wrote one first, theirs stands. An empty file is replaced.
    writeFileSync(file, `${id}\n`, { mode: 0o600, flag: existing === undefined ? "wx" : "w" });
    return id;
  } catch (e) {
    const raced = (e as NodeJS.ErrnoException).code === "EEXIST" ? readTrimmed(file) : undefined;
    if (raced) return raced;
    throw new BerthError("unavailable", `cannot write the host id to ${file}: ${describeError(e)}`);
  }
}

/** What readHostId reports for a host whose machine id is `machineId`. */
export function hashMachineId(machineId: string): string {
  return createHmac("sha256", MACHINE_ID_KEY).update(machineId).digest("hex").slice(0, 32);
}

function readTrimmed(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8").trim();
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT" || code === "ENOTDIR" || code === "EACCES") return undefined;
    throw new BerthError("unavailable", `cannot read the host id from ${path}: ${describeError(e)}`);
  }
}
