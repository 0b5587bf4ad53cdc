// The host-wide sysctls the agent turns on (IPv4 and IPv6 forwarding), with
// the values they had before berth first set them: kept in the network's
// data directory so `berth agent uninstall` can put them back.

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** The sysctls Network.start sets, as paths below /proc/sys. */
export const FORWARDING_SYSCTLS = ["net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"] as const;

export const SYSCTL_RECORD = "sysctl-before.json";

/**
 * Writes the current values of `keys` to `<dataDir>/sysctl-before.json`
 * unless that file exists: only the first start, before berth changed
 * anything, records them; later starts (which see berth's own values) keep it.
 */
export function recordSysctlsOnce(dataDir: string, keys: readonly string[], procSys = "/proc/sys"): void {
  const file = join(dataDir, SYSCTL_RECORD);
  if (existsSync(file)) return;
  const values: Record<string, string> = {};
  for (const k of keys) {
    try {
      values[k] = readFileSync(join(procSys, k), "utf8").trim();
    } catch {
      // A host without IPv6 has no such key: nothing to record or restore.
    }
  }
  writeFileSync(file, `${JSON.stringify(values, null, 2)}\n`, { mode: 0o600 });
}

/** The recorded values, or undefined when the agent never recorded any (an older agent's data directory). */
export function readSysctlRecord(dataDir: string): Record<string, string> | undefined {
  try {
    return JSON.parse(readFileSync(join(dataDir, SYSCTL_RECORD), "utf8")) as Record<string, string>;
  } catch {
    return undefined;
  }
}
