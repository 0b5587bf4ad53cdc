// The resolv.conf bind-mounted into containers. Containers cannot reach the
// host itself (nor its loopback), so a resolver on 127.0.0.53 (systemd-resolved),
// 127.0.0.1 (dnsmasq, unbound) or any other host address is useless to them.

import { readFile } from "node:fs/promises";
import { isIP } from "node:net";

export interface ResolvConfInput {
  /** Files to read in order; the first that yields a reachable nameserver wins (search/options lines come from the first readable). */
  sources: string[];
  /** Addresses of the host itself (unreachable from containers). */
  hostAddresses: string[];
  fallbackNameservers: string[];
}

export interface ResolvConf {
  text: string;
  nameservers: string[];
  /** Which file the nameservers came from, or "fallback". */
  origin: string;
}

function isReachableNameserver(addr: string, hostAddresses: Set<string>): boolean {
  if (isIP(addr) === 0) return false; // includes scoped fe80::1%eth0
  const lower = addr.toLowerCase();
  if (lower.startsWith("127.") || lower === "::1" || lower === "0.0.0.0" || lower === "::") return false;
  if (/^fe[89ab]/.test(lower)) return false; // link-local: the host's link, not the container's
  return !hostAddresses.has(lower);
}

export async function containerResolvConf(input: ResolvConfInput): Promise<ResolvConf> {
  const host = new Set(input.hostAddresses.map((a) => a.toLowerCase()));
  let extra: string[] | undefined;
  for (const source of input.sources) {
    let text: string;
    try {
      text = await readFile(source, "utf8");
    } catch {
      continue;
    }
    const lines = text.split("\n").map((l) => l.trim());
    extra ??= lines.filter((l) => /^(search|domain|options)\s/.test(l));
    const nameservers = lines
      .map((l) => /^nameserver\s+(\S+)/.exec(l)?.[1])
      .filter((a): a is string => a !== undefined && isReachableNameserver(a, host));
    if (nameservers.length > 0) return render(nameservers.slice(0, 3), extra, source);
  }
  return render(input.fallbackNameservers.slice(0, 3), extra ?? [], "fallback");
}

function render(nameservers: string[], extra: string[], origin: string): ResolvConf {
  const text = [
    `# written by the berth agent (nameservers from ${origin})`,
    ...nameservers.map((n) => `nameserver ${n}`),
    ...extra,
    "",
  ].join("\n");
  return { text, nameservers, origin };
}
