import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { test } from "node:test";
import { CA_STORE_KEY, ClusterPki, type SecretStore } from "../../coordinator/pki/cluster-pki.ts";
import { BerthError } from "../../shared/errors.ts";

class MemoryStore implements SecretStore {
  readonly data = new Map<string, string>();
  puts = 0;
  async get(key: string) {
    return this.data.get(key);
  }
  async put(key: string, value: string) {
    this.puts++;
    this.data.set(key, value);
  }
}

test("the CA is created on first load, persisted, and the same one afterwards", async () => {
  const store = new MemoryStore();
  const first = await ClusterPki.load(store);
  assert.equal(store.puts, 1);
  const saved = JSON.parse(store.data.get(CA_STORE_KEY) ?? "{}");
  assert.equal(saved.certPem, first.caPem);
  assert.match(saved.keyPem, /BEGIN PRIVATE KEY/);

  const second = await ClusterPki.load(store);
  assert.equal(second.caPem, first.caPem);
  assert.equal(store.puts, 1, "a second load must not replace the CA");

  // Certificates issued after a reload verify against the first CA.
  const cert = new X509Certificate((await second.issueAgentCert("agent-x1")).certPem);
  assert.ok(cert.checkIssued(new X509Certificate(first.caPem)));
  assert.ok(cert.verify(new X509Certificate(first.caPem).publicKey));
});

test("agent certificates carry the agent id as CN and DNS name, plus its addresses", async () => {
  const pki = await ClusterPki.load(new MemoryStore());
  const ca = new X509Certificate(pki.caPem);
  const issued = await pki.issueAgentCert("agent-7k2m", {
    dnsNames: ["gpu-07.lab"],
    ipAddresses: ["192.0.2.10"],
  });
  const cert = new X509Certificate(issued.certPem);
  assert.ok(cert.verify(ca.publicKey));
  assert.match(cert.subject, /CN=agent-7k2m/);
  assert.equal(cert.subjectAltName, "DNS:agent-7k2m, DNS:gpu-07.lab, IP Address:192.0.2.10");
  assert.deepEqual([...(cert.keyUsage ?? [])].sort(), ["1.3.6.1.5.5.7.3.1", "1.3.6.1.5.5.7.3.2"]);
});

test("the coordinator client certificate is client-only", async () => {
  const pki = await ClusterPki.load(new MemoryStore());
  const cert = new X509Certificate((await pki.issueCoordinatorClientCert()).certPem);
  assert.ok(cert.verify(new X509Certificate(pki.caPem).publicKey));
  assert.match(cert.subject, /CN=berth-coordinator/);
  assert.deepEqual(cert.keyUsage, ["1.3.6.1.5.5.7.3.2"]);
});

test("a corrupt stored CA is an error naming the key, never silently replaced", async () => {
  const store = new MemoryStore();
  store.data.set(CA_STORE_KEY, '{"certPem": "nope"}');
  await assert.rejects(
    ClusterPki.load(store),
    (e: unknown) =>
      e instanceof BerthError &&
      e.code === "internal" &&
      e.message.includes(`under ${CA_STORE_KEY} is corrupt`),
  );
  assert.equal(store.puts, 0);
  assert.equal(store.data.get(CA_STORE_KEY), '{"certPem": "nope"}');
});

test("coordinators racing on an empty store settle on the CA the store kept", async () => {
  // A store whose put keeps only the first value, like an INSERT that loses a
  // unique-key race: the loser must adopt the winner's CA, not its own.
  const data = new Map<string, string>();
  const firstWins: SecretStore = {
    get: async (k) => data.get(k),
    put: async (k, v) => {
      if (!data.has(k)) data.set(k, v);
    },
  };
  const [a, b] = await Promise.all([ClusterPki.load(firstWins), ClusterPki.load(firstWins)]);
  assert.equal(a.caPem, b.caPem);
});

test("with putIfAbsent, coordinators racing on an empty store all adopt the one CA stored", async () => {
  const data = new Map<string, string>();
  let puts = 0;
  const store: SecretStore = {
    get: async (k) => data.get(k),
    put: async () => {
      puts++;
    },
    putIfAbsent: async (k, v) => {
      if (!data.has(k)) data.set(k, v);
      return data.get(k)!;
    },
  };
  const loaded = await Promise.all([ClusterPki.load(store), ClusterPki.load(store), ClusterPki.load(store)]);
  assert.equal(new Set(loaded.map((p) => p.caPem)).size, 1);
  assert.equal(loaded[0]!.caPem, JSON.parse(data.get(CA_STORE_KEY)!).certPem);
  assert.equal(puts, 0, "put must not overwrite when putIfAbsent exists");
});
