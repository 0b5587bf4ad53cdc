import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { X509Certificate, createPrivateKey } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { before, describe, test } from "node:test";
import { type PemCertificate, createClusterCa, issueCertificate } from "../../coordinator/pki/ca.ts";
import { BerthError } from "../../shared/errors.ts";
import { needs, tempDir } from "../helpers/env.ts";

const SERVER_AUTH = "1.3.6.1.5.5.7.3.1";
const CLIENT_AUTH = "1.3.6.1.5.5.7.3.2";
const YEAR_MS = 365 * 86_400_000;

const invalid = (pattern: RegExp) => (e: unknown) =>
  e instanceof BerthError && e.code === "invalid_request" && pattern.test(e.message);

describe("cluster CA", () => {
  let ca: PemCertificate;
  let caCert: X509Certificate;

  before(async () => {
    ca = await createClusterCa({ commonName: "test cluster CA" });
    caCert = new X509Certificate(ca.certPem);
  });

  test("is a self-signed CA valid for ten years whose key matches", () => {
    assert.equal(caCert.ca, true);
    assert.match(caCert.subject, /CN=test cluster CA/);
    assert.equal(caCert.subject, caCert.issuer);
    assert.ok(caCert.verify(caCert.publicKey), "self-signature verifies");
    assert.ok(caCert.checkPrivateKey(createPrivateKey(ca.keyPem)));
    const lifetime = Date.parse(caCert.validTo) - Date.parse(caCert.validFrom);
    assert.ok(lifetime > 9.9 * YEAR_MS && lifetime < 10.1 * YEAR_MS, `lifetime ${lifetime} ms`);
    assert.ok(Date.parse(caCert.validFrom) <= Date.now());
  });

  test("issues a server+client certificate with its SANs that verifies against the CA", async () => {
    const issued = await issueCertificate(ca, {
      commonName: "agent-abc",
      dnsNames: ["agent-abc", "gpu-host-7.example.internal"],
      ipAddresses: ["10.1.2.3", "fd00::7"],
      usage: "both",
    });
    const leaf = new X509Certificate(issued.certPem);
    assert.ok(leaf.checkIssued(caCert));
    assert.ok(leaf.verify(caCert.publicKey));
    assert.ok(leaf.checkPrivateKey(createPrivateKey(issued.keyPem)));
    assert.equal(leaf.ca, false);
    assert.match(leaf.subject, /CN=agent-abc/);
    const sans = (leaf.subjectAltName ?? "").split(", ");
    for (const san of [
      "DNS:agent-abc",
      "DNS:gpu-host-7.example.internal",
      "IP Address:10.1.2.3",
      "IP Address:FD00:0:0:0:0:0:0:7",
    ]) {
      assert.ok(sans.includes(san), `${san} in ${leaf.subjectAltName}`);
    }
    assert.deepEqual([...(leaf.keyUsage ?? [])].sort(), [SERVER_AUTH, CLIENT_AUTH].sort());
    assert.notEqual(leaf.serialNumber, caCert.serialNumber);
  });

  test("usage decides the extended key usage", async () => {
    const server = new X509Certificate(
      (await issueCertificate(ca, { commonName: "s", usage: "server" })).certPem,
    );
    const client = new X509Certificate(
      (await issueCertificate(ca, { commonName: "c", usage: "client" })).certPem,
    );
    assert.deepEqual(server.keyUsage, [SERVER_AUTH]);
    assert.deepEqual(client.keyUsage, [CLIENT_AUTH]);
    assert.equal(client.subjectAltName, undefined);
  });

  test("a certificate from another CA does not verify against this one", async () => {
    const other = await createClusterCa();
    const foreign = new X509Certificate(
      (await issueCertificate(other, { commonName: "x", usage: "client" })).certPem,
    );
    assert.equal(foreign.checkIssued(caCert), false);
    assert.equal(foreign.verify(caCert.publicKey), false);
  });

  test("days sets the lifetime, capped by the CA's own", async () => {
    const short = new X509Certificate(
      (await issueCertificate(ca, { commonName: "s", usage: "server", days: 2 })).certPem,
    );
    const lifetime = Date.parse(short.validTo) - Date.now();
    assert.ok(lifetime > 1.9 * 86_400_000 && lifetime <= 2 * 86_400_000, `lifetime ${lifetime} ms`);
    const long = new X509Certificate(
      (await issueCertificate(ca, { commonName: "l", usage: "server", days: 36_500 })).certPem,
    );
    assert.equal(Date.parse(long.validTo), Date.parse(caCert.validTo));
  });

  test("bad requests are refused with the cause", async () => {
    await assert.rejects(issueCertificate(ca, { commonName: "", usage: "server" }), invalid(/commonName/));
    await assert.rejects(
      issueCertificate(ca, { commonName: "x".repeat(65), usage: "server" }),
      invalid(/commonName/),
    );
    await assert.rejects(
      issueCertificate(ca, { commonName: "a", usage: "server", ipAddresses: ["10.0.0.300"] }),
      invalid(/"10.0.0.300" is not an IP address/),
    );
    await assert.rejects(
      issueCertificate(ca, { commonName: "a", usage: "server", dnsNames: ["bad name"] }),
      invalid(/"bad name" is not a valid DNS name/),
    );
    await assert.rejects(
      issueCertificate(ca, { commonName: "a", usage: "peer" as "server" }),
      invalid(/usage must be server, client or both/),
    );
    await assert.rejects(
      issueCertificate(ca, { commonName: "a", usage: "server", days: 0 }),
      invalid(/days/),
    );
  });

  test("only a real CA with its own key can issue", async () => {
    const leaf = await issueCertificate(ca, { commonName: "leaf", usage: "server" });
    await assert.rejects(
      issueCertificate(leaf, { commonName: "a", usage: "server" }),
      invalid(/is not a CA/),
    );
    const other = await createClusterCa();
    await assert.rejects(
      issueCertificate({ certPem: ca.certPem, keyPem: other.keyPem }, { commonName: "a", usage: "server" }),
      invalid(/key does not belong/),
    );
    await assert.rejects(
      issueCertificate({ certPem: "garbage", keyPem: ca.keyPem }, { commonName: "a", usage: "server" }),
      invalid(/not valid PEM/),
    );
  });
});

test("openssl agrees: issued certificates verify for their purpose only", async (t) => {
  if (!needs(t, { commands: ["openssl"] })) return;
  const dir = tempDir(t);
  const ca = await createClusterCa();
  const files = {
    ca: join(dir, "ca.pem"),
    agent: join(dir, "agent.pem"),
    client: join(dir, "client.pem"),
  };
  writeFileSync(files.ca, ca.certPem);
  writeFileSync(files.agent, (await issueCertificate(ca, { commonName: "agent-o", usage: "both" })).certPem);
  writeFileSync(files.client, (await issueCertificate(ca, { commonName: "c", usage: "client" })).certPem);
  const verify = (purpose: string, file: string) =>
    spawnSync("openssl", ["verify", "-x509_strict", "-purpose", purpose, "-CAfile", files.ca, file], {
      encoding: "utf8",
    });
  for (const purpose of ["sslserver", "sslclient"]) {
    const r = verify(purpose, files.agent);
    assert.equal(r.status, 0, `agent cert as ${purpose}: ${r.stdout}${r.stderr}`);
  }
  assert.equal(verify("sslclient", files.client).status, 0);
  assert.notEqual(verify("sslserver", files.client).status, 0, "a client-only certificate must not serve");
});
