// The fleet's hosts and berth's ports on them, as an agent knows them: the
// coordinator it joined and the NATS servers it was handed (names resolved
// to every address), the hosts the operator named with --fleet-host, and the
// ports of all of these plus berth's defaults and the agent's own ports.
// Network.setFleet() denies those ports on those hosts to every container.

import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { DEFAULT_FLEET_PORTS } from "./egress-guard.ts";

export interface FleetInput {
  /** Coordinator and NATS URLs (a NATS URL may list several servers, comma-separated). */
  urls: string[];
  /** The operator's addresses or CIDRs of other fleet hosts. */
  hosts: string[];
  /** The agent's own ports (gRPC, tunnel, metrics); 0 and undefined are left out. */
  ports: (number | undefined)[];
  /** Told about a name that does not resolve (it is left out; the rest still applies). */
  warn?: (message: string) => void;
  resolve?: (host: string) => Promise<string[]>;
}

const resolveAll = async (host: string) => (await lookup(host, { all: true })).map((a) => a.address);

export async function fleetDenyOf(input: FleetInput): Promise<{ hosts: string[]; ports: number[] }> {
  const hosts = new Set(input.hosts);
  const ports = new Set<number>(DEFAULT_FLEET_PORTS);
  for (const p of input.ports) if (p) ports.add(p);
  const resolve = input.resolve ?? resolveAll;
  for (const url of input.urls
    .flatMap((u) => u.split(","))
    .map((u) => u.trim())
    .filter(Boolean)) {
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      input.warn?.(
        `fleet address ${JSON.stringify(url)} is not a URL; left out of the containers' deny list`,
      );
      continue;
    }
    const host = u.hostname.replace(/^\[(.*)\]$/, "$1");
    const port = Number(
      u.port || { "http:": 80, "https:": 443, "nats:": 4222, "tls:": 4222 }[u.protocol] || 0,
    );
    if (port) ports.add(port);
    if (isIP(host)) {
      hosts.add(host);
      continue;
    }
    try {
      for (const a of await resolve(host)) hosts.add(a);
    } catch (e) {
      input.warn?.(
        `cannot resolve ${host} (${(e as Error).message}); its addresses are left out of the containers' deny list`,
      );
    }
  }
  return { hosts: [...hosts], ports: [...ports].sort((a, b) => a - b) };
}
