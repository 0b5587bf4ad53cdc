// `berth up --advertise ADDR` (docs/install.md, "Joining more hosts"): the
// coordinator's API, NATS and the cluster registry are served on ADDR over
// TLS, so other hosts can join. Their certificate is issued from the
// cluster CA the coordinator keeps in its store (the one agents are handed
// at join), so a joining host needs one fingerprint to trust all three.
// The CA is read (or made, on a first start) before NATS starts, through
// the store the coordinator then opens.

import { mkdirSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { isIP } from "node:net";
import { join } from "node:path";
import { BerthError, describeError } from "../../shared/errors.ts";
import { caFingerprint } from "../../shared/tls-fetch.ts";

export interface AdvertisedTls {
  /** The address (an IP or a DNS name) the servers listen on and joining hosts dial. */
  host: string;
  caPem: string;
  /** sha256:HEX of the CA: what `berth agent --ca-fingerprint` checks. */
  fingerprint: string;
  caFile: string;
  certFile: string;
  keyFile: string;
}

/** ADDR as --advertise takes it: an IP address or a host name, no port, no scheme. */
export function parseAdvertise(v: string): string {
  const host = v.trim().replace(/^\[(.*)\]$/, "$1");
  if (isIP(host) === 0 && !/^[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$/.test(host))
    throw new BerthError(
      "invalid_request",
      `--advertise ${JSON.stringify(v)} must be this host's address or DNS name as other hosts reach it (no port)`,
    );
  if (
    host === "0.0.0.0" ||
    host === "::" ||
    host.startsWith("127.") ||
    host === "::1" ||
    host === "localhost"
  )
    throw new BerthError(
      "invalid_request",
      `--advertise ${JSON.stringify(v)}: name one address of this host that other hosts reach, not a wildcard or loopback`,
    );
  return host;
}

/**
 * The server certificate for ADDR (and loopback), issued now from the cluster CA in `store`, with
 * the CA, written under `dir` (key 0600). A new one at every start: ADDR may have changed.
 */
export async function issueAdvertisedTls(store: string, dir: string, host: string): Promise<AdvertisedTls> {
  let caPem: string;
  let cert: { certPem: string; keyPem: string };
  // Loaded here, not at the top: `berth --help` never opens a store.
  const { Store } = await import("../../coordinator/records.ts");
  const { ClusterPki } = await import("../../coordinator/pki/index.ts");
  let opened: Awaited<ReturnType<typeof Store.open>> | undefined;
  try {
    opened = await Store.open(store);
    const pki = await ClusterPki.load(opened.kv);
    caPem = pki.caPem;
    const ip = isIP(host) !== 0;
    cert = await pki.issueServerCert("berth-up", {
      dnsNames: [...new Set(["localhost", hostname(), ...(ip ? [] : [host])])],
      ipAddresses: [...new Set(["127.0.0.1", ...(ip ? [host] : [])])],
    });
  } catch (e) {
    throw new BerthError("unavailable", `cannot issue the TLS certificate for ${host}: ${describeError(e)}`);
  } finally {
    await opened?.close();
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const files = {
    caFile: join(dir, "ca.pem"),
    certFile: join(dir, "server.pem"),
    keyFile: join(dir, "server-key.pem"),
  };
  writeFileSync(files.caFile, caPem, { mode: 0o644 });
  writeFileSync(files.certFile, cert.certPem, { mode: 0o644 });
  writeFileSync(files.keyFile, cert.keyPem, { mode: 0o600 });
  return { host, caPem, fingerprint: caFingerprint(caPem), ...files };
}

/** host:port with an IPv6 address in brackets. */
export const hostPort = (host: string, port: number) => `${host.includes(":") ? `[${host}]` : host}:${port}`;
