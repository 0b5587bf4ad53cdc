// The cluster's CA, kept in the coordinator's store so every coordinator
// replica signs with the same one, and the certificates berth issues from it.

import { BerthError, describeError } from "../../shared/errors.ts";
import { COORDINATOR_CLIENT_NAME } from "../../shared/cluster-names.ts";
import { type PemCertificate, createClusterCa, isDnsName, issueCertificate, parseCa } from "./ca.ts";

/** Where the CA is persisted; implemented over the SQL store by the coordinator. */
export interface SecretStore {
  get(key: string): Promise<string | undefined>;
  put(key: string, value: string): Promise<void>;
  /**
   * Sets `key` only if it is absent and returns what is stored afterwards.
   * With it, coordinators starting at once on an empty store agree on one CA;
   * without it, the last `put` wins and a loser may briefly sign with its own.
   */
  putIfAbsent?(key: string, value: string): Promise<string>;
}

export const CA_STORE_KEY = "pki.ca";
export { COORDINATOR_CLIENT_NAME };

export interface AgentCertificateOptions {
  /** Names the agent can be dialled by (its hostname, ...). */
  dnsNames?: string[];
  /** Addresses the agent can be dialled at. */
  ipAddresses?: string[];
  /** @default 365 */
  days?: number;
  /** SPKI PEM of the agent's own RSA key (a renewal): no private key is made. */
  publicKeyPem?: string;
}

function decodeCa(raw: string): PemCertificate {
  let ca: PemCertificate;
  try {
    const parsed = JSON.parse(raw) as Partial<PemCertificate>;
    if (typeof parsed.certPem !== "string" || typeof parsed.keyPem !== "string")
      throw new Error("certPem/keyPem missing");
    ca = { certPem: parsed.certPem, keyPem: parsed.keyPem };
    parseCa(ca);
  } catch (e) {
    throw new BerthError(
      "internal",
      `the cluster CA stored under ${CA_STORE_KEY} is corrupt: ${describeError(e)}`,
    );
  }
  return ca;
}

export class ClusterPki {
  private constructor(private readonly ca: PemCertificate) {}

  /** The cluster CA from `store`, created and saved on first start. */
  static async load(store: SecretStore, options: { commonName?: string } = {}): Promise<ClusterPki> {
    const existing = await store.get(CA_STORE_KEY);
    if (existing !== undefined) return new ClusterPki(decodeCa(existing));
    const created = JSON.stringify(await createClusterCa({ commonName: options.commonName }));
    let stored: string | undefined;
    if (store.putIfAbsent) {
      stored = await store.putIfAbsent(CA_STORE_KEY, created);
    } else {
      await store.put(CA_STORE_KEY, created);
      // Re-read, so a store that keeps the first of two racing writes wins.
      stored = await store.get(CA_STORE_KEY);
    }
    if (stored === undefined)
      throw new BerthError("internal", `the secret store did not keep ${CA_STORE_KEY}`);
    return new ClusterPki(decodeCa(stored));
  }

  /** The CA certificate agents and coordinators trust. */
  get caPem(): string {
    return this.ca.certPem;
  }

  /**
   * A server+client certificate for an agent: CN is the agent id, which is
   * also a DNS name in the certificate so clients may verify by agent id.
   */
  issueAgentCert(agentId: string, options: AgentCertificateOptions = {}): Promise<PemCertificate> {
    const dnsNames = [...(options.dnsNames ?? [])];
    if (isDnsName(agentId) && !dnsNames.includes(agentId)) dnsNames.unshift(agentId);
    return issueCertificate(this.ca, {
      commonName: agentId,
      dnsNames,
      ipAddresses: options.ipAddresses ?? [],
      usage: "both",
      days: options.days,
      ...(options.publicKeyPem ? { publicKeyPem: options.publicKeyPem } : {}),
    });
  }

  /**
   * A server certificate for the endpoints `berth up --advertise` serves
   * (the coordinator's API, NATS, the cluster registry): agents trust it
   * through the CA they are handed at join.
   */
  issueServerCert(
    commonName: string,
    names: { dnsNames: string[]; ipAddresses: string[]; days?: number },
  ): Promise<PemCertificate> {
    return issueCertificate(this.ca, {
      commonName,
      dnsNames: names.dnsNames,
      ipAddresses: names.ipAddresses,
      usage: "server",
      days: names.days,
    });
  }

  /** The client certificate a coordinator presents to agents. */
  issueCoordinatorClientCert(options: { days?: number } = {}): Promise<PemCertificate> {
    return issueCertificate(this.ca, {
      commonName: COORDINATOR_CLIENT_NAME,
      usage: "client",
      days: options.days,
    });
  }
}
