// Layers from peers (docs/images.md, "Layers from peers"): four agents' image
// stores, each serving its blobs on its own agent tunnel (mutual TLS with an
// agent certificate of a real cluster CA, each on its own loopback address),
// pull the same new four-layer image at once from a real docker-registry
// behind a proxy that counts the blob GETs it forwards: each layer is fetched
// from the registry at most twice in all, and every store ends with the
// image whole. A peer that lies about a blob (says it holds it, sends other
// bytes) or cannot be reached costs a registry fetch, never the pull; a
// client without a cluster certificate gets no blob.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, request, type Server } from "node:http";
import { request as httpsRequest } from "node:https";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { test } from "node:test";
import { type BlobPeer, ImageStore, PeerBlobs, serveBlob } from "../../agent/images/index.ts";
import { TunnelServer } from "../../agent/proxy/index.ts";
import { COORDINATOR_CLIENT_NAME, ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { freePort } from "../../shared/net.ts";
import { imageFile } from "../helpers/image-layers.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { memoryStore } from "../helpers/store.ts";

const MiB = 1024 * 1024;
const AGENTS = 4;

/** A layer tarball holding one file of `bytes` random bytes at opt/<name>.bin. */
function layerTar(work: string, name: string, bytes: number): string {
  const dir = join(work, name);
  mkdirSync(join(dir, "opt"), { recursive: true });
  writeFileSync(join(dir, "opt", `${name}.bin`), randomBytes(bytes));
  const tar = join(work, `${name}.tar`);
  execFileSync("tar", ["-cf", tar, "--numeric-owner", "-C", dir, "./opt"]);
  return tar;
}

/** A proxy in front of the registry that counts the blob GETs it forwards, by digest. */
async function countingProxy(
  t: { after: (fn: () => unknown) => void },
  upstreamPort: number,
): Promise<{ host: string; blobGets: Map<string, number> }> {
  const blobGets = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const m = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(req.url ?? "");
    if (m && req.method === "GET") blobGets.set(m[1] as string, (blobGets.get(m[1] as string) ?? 0) + 1);
    const up = request(
      { host: "127.0.0.1", port: upstreamPort, method: req.method, path: req.url, headers: req.headers },
      (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      },
    );
    up.once("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return { host: `127.0.0.1:${(server.address() as AddressInfo).port}`, blobGets };
}

test("four agents pulling one new image at once: each layer from the registry at most twice", {
  timeout: 10 * 60_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: ["docker-registry", "skopeo", "umoci", "tar", "python3"] })) return;
  const registry = await startTestRegistry(t);
  const proxy = await countingProxy(t, registry.port);
  const work = tempDir(t, "berth-peer-layers-");
  const pki = await ClusterPki.load(memoryStore());

  // The image: a base and three layers of random bytes, pushed straight to the registry.
  const src = new ImageStore({ root: join(work, "src"), clusterRegistry: { host: registry.host } });
  const rootfs = join(work, "rootfs");
  mkdirSync(join(rootfs, "etc"), { recursive: true });
  writeFileSync(join(rootfs, "etc", "base.txt"), "base\n");
  let img = await src.importRootfs(rootfs, { name: "localhost/peer-layers:base" });
  for (const [i, size] of [4, 6, 8].entries())
    img = await src.commitLayer(img.ref, layerTar(work, `l${i}`, size * MiB), {
      name: `localhost/peer-layers:l${i}`,
    });
  const pushed = await src.pushToCluster(img.ref, { repository: "berth/peer-layers", tag: "v1" });
  const ref = pushed.replace(registry.host, proxy.host);
  const manifest = (await (
    await fetch(`${registry.url}/v2/berth/peer-layers/manifests/${img.digest}`, {
      headers: { accept: "application/vnd.oci.image.manifest.v1+json" },
    })
  ).json()) as { layers: { digest: string }[] };
  const layers = manifest.layers.map((l) => l.digest);
  assert.equal(layers.length, 4);

  // Four agents, each with its certificate, its store and its tunnel on its own loopback address.
  const peers: BlobPeer[] = [];
  const agents = await Promise.all(
    Array.from({ length: AGENTS }, async (_, i) => {
      const agentId = `agent-peer-${i}`;
      const cert = await pki.issueAgentCert(agentId);
      const tls = { caPem: pki.caPem, ...cert };
      const peerBlobs = new PeerBlobs({ self: agentId, peers: async () => peers, tls });
      const store = new ImageStore({
        root: join(work, agentId),
        clusterRegistry: { host: proxy.host },
        peerBlobs,
      });
      const holder = store.blobHolder();
      assert.ok(holder);
      const tunnel = await TunnelServer.start({
        host: `127.0.0.${11 + i}`,
        port: 0,
        tls,
        containers: { lookup: () => undefined },
        allowedClientNames: [COORDINATOR_CLIENT_NAME],
        requests: (req, res) => serveBlob(req, res, holder),
      });
      t.after(() => tunnel.stop());
      peers.push({ agentId, address: `127.0.0.${11 + i}:${tunnel.port}` });
      return { agentId, store, tls, tunnel };
    }),
  );

  const pulled = await Promise.all(agents.map((a) => a.store.pull(ref)));
  for (const info of pulled) {
    assert.equal(info.digest, img.digest);
    assert.equal(readFileSync(imageFile(info, "etc/base.txt"), "utf8"), "base\n");
    assert.equal(readFileSync(imageFile(info, "opt/l2.bin")).length, 8 * MiB);
  }
  const counts = layers.map((d) => proxy.blobGets.get(d) ?? 0);
  t.diagnostic(`registry blob GETs per layer: ${counts.join(", ")} (of ${AGENTS} agents)`);
  for (const [i, n] of counts.entries()) {
    assert.ok(n >= 1, `layer ${i} came from the registry at least once (it is the source)`);
    assert.ok(n <= 2, `layer ${i} was fetched from the registry ${n} times: at most twice`);
  }

  await t.test("a peer that lies or is gone costs a registry fetch, not the pull", async () => {
    // A liar with a real agent certificate: says it holds every blob, sends other bytes.
    const liarCert = await pki.issueAgentCert("agent-liar");
    const liar = await TunnelServer.start({
      host: "127.0.0.21",
      port: 0,
      tls: { caPem: pki.caPem, ...liarCert },
      containers: { lookup: () => undefined },
      requests: (req, res) => {
        res.writeHead(200, { "x-berth-blob-state": "held" });
        res.end(req.method === "HEAD" ? undefined : randomBytes(64 * 1024));
        return true;
      },
    });
    t.after(() => liar.stop());
    const gone = await freePort();
    const cert = await pki.issueAgentCert("agent-fresh");
    const fresh = new ImageStore({
      root: join(work, "fresh"),
      clusterRegistry: { host: proxy.host },
      peerBlobs: new PeerBlobs({
        self: "agent-fresh",
        peers: async () => [
          { agentId: "agent-liar", address: `127.0.0.21:${liar.port}` },
          { agentId: "agent-gone", address: `127.0.0.1:${gone}` },
        ],
        tls: { caPem: pki.caPem, ...cert },
      }),
    });
    const before = layers.map((d) => proxy.blobGets.get(d) ?? 0);
    const info = await fresh.pull(ref);
    assert.equal(info.digest, img.digest);
    assert.equal(readFileSync(imageFile(info, "opt/l1.bin")).length, 6 * MiB);
    assert.deepEqual(
      layers.map((d, i) => (proxy.blobGets.get(d) ?? 0) - (before[i] as number)),
      layers.map(() => 1),
      "every layer the liar offered came from the registry once",
    );
  });

  await t.test("only a cluster certificate gets a blob", async () => {
    const peer = peers[0] as BlobPeer;
    const [host, port] = peer.address.split(":") as [string, string];
    const outsider = new Promise<string>((resolve) => {
      const req = httpsRequest(
        { host, port: Number(port), path: `/v1/blobs/${layers[0]}`, ca: pki.caPem, agent: false },
        (res) => resolve(`HTTP ${res.statusCode}`),
      );
      req.once("error", (e) => resolve(`refused: ${e.message}`));
      req.end();
    });
    assert.match(await outsider, /^refused/);
    // A peer asking with its certificate gets the bytes.
    const first = agents[1] as (typeof agents)[number];
    const body = await new PeerBlobs({ self: first.agentId, peers: async () => [], tls: first.tls }).open(
      peer,
      layers[0] as string,
    );
    let n = 0;
    for await (const chunk of body) n += (chunk as Buffer).length;
    assert.ok(n > 0);
  });
});
