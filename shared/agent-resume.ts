// An agent that joined once comes back at each start with its own identity,
// not the join token: it signs a resume request with the private key of the
// TLS certificate the cluster CA issued it at join (docs/install.md, "Agent
// credentials"). The join token can then be revoked without cutting off hosts
// that already joined; `berth agent revoke` is what cuts one host off.

import { X509Certificate, createPrivateKey, sign, verify } from "node:crypto";

/** How far a resume's signing time may be from the coordinator's clock. */
export const RESUME_CLOCK_SKEW_MS = 10 * 60_000;

/** An agent renews its certificate at a resume when it expires within this. */
export const CERT_RENEW_BEFORE_MS = 30 * 86_400_000;

export interface ResumeFields {
  agentId: string;
  hostname: string;
  version: string;
  grpcAddress: string;
  /** ISO time of signing: bounds how long a captured request could be replayed. */
  signedAt: string;
  /** SPKI PEM of a key the agent made for a new certificate; its private half stays on the host. */
  renewPublicKey?: string;
}

/** The bytes signed: every field, so no part of the request can be swapped. */
export function resumeSigningBytes(f: ResumeFields): Buffer {
  return Buffer.from(
    JSON.stringify([
      "berth-agent-resume/1",
      f.agentId,
      f.hostname,
      f.version,
      f.grpcAddress,
      f.signedAt,
      f.renewPublicKey ?? "",
    ]),
  );
}

export function signResume(f: ResumeFields, keyPem: string): string {
  return sign("sha256", resumeSigningBytes(f), createPrivateKey(keyPem)).toString("base64");
}

/**
 * Why a resume is not proven by `certPem` and `signature`, or undefined when
 * it is: the certificate is the CA's, names the agent, is within its validity,
 * and its key signed these fields within the allowed clock skew.
 */
export function resumeProofProblem(
  f: ResumeFields,
  certPem: string,
  signature: string,
  caPem: string,
  now = Date.now(),
): string | undefined {
  let cert: X509Certificate;
  let ca: X509Certificate;
  try {
    cert = new X509Certificate(certPem);
    ca = new X509Certificate(caPem);
  } catch {
    return "the certificate is not valid PEM";
  }
  if (!cert.checkIssued(ca) || !cert.verify(ca.publicKey))
    return "the certificate is not from this cluster's CA";
  const cn = /^CN=(.*)$/m.exec(cert.subject)?.[1];
  if (cn !== f.agentId) return `the certificate is not agent ${f.agentId}'s`;
  if (now < Date.parse(cert.validFrom) || now > Date.parse(cert.validTo)) {
    return `the certificate is outside its validity (until ${new Date(cert.validTo).toISOString()})`;
  }
  const signedAt = Date.parse(f.signedAt);
  if (!Number.isFinite(signedAt) || Math.abs(now - signedAt) > RESUME_CLOCK_SKEW_MS) {
    return "the signing time is missing or more than 10 minutes from the coordinator's clock";
  }
  let ok = false;
  try {
    ok = verify("sha256", resumeSigningBytes(f), cert.publicKey, Buffer.from(signature, "base64"));
  } catch {
    ok = false;
  }
  return ok ? undefined : "the signature does not match the certificate";
}

/** Milliseconds until the certificate expires (negative once it has). */
export function certExpiresInMs(certPem: string, now = Date.now()): number {
  return Date.parse(new X509Certificate(certPem).validTo) - now;
}
