// Layers from peers across hosts (docs/images.md, "Layers from peers"): four
// test hosts, each a process in its own network namespace on one bridge
// with its own address, its own image store and its blob server on the agent
// tunnel (a real cluster CA's agent certificates), start pulling the same
// new four-layer image at once from a docker-registry reached through a
// proxy on the bridge that counts the blob GETs it forwards: the registry
// serves each layer at most twice in all, and every host ends with the image.

import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { createServer, request } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { promisify } from "node:util";
import { ImageStore } from "../../agent/images/index.ts";
import { ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { memoryStore } from "../helpers/store.ts";
import { Teardown, testNames } from "../network/helpers.ts";

const exec = promisify(execFile);
const MiB = 1024 * 1024;
const HOSTS = 4;
const TUNNEL_PORT = 7443;
const HOST_SCRIPT = join(import.meta.dirname, "peer-host.ts");

function layerTar(work: string, name: string, bytes: number): string {
  const dir = join(work, name);
  mkdirSync(join(dir, "opt"), { recursive: true });
  writeFileSync(join(dir, "opt", `${name}.bin`), randomBytes(bytes));
  const tar = join(work, `${name}.tar`);
  execFileSync("tar", ["-cf", tar, "--numeric-owner", "-C", dir, "./opt"]);
  return tar;
}

test("four hosts in network namespaces start one new image at once: each layer from the registry at most twice", {
  timeout: 10 * 60_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: ["ip", "docker-registry", "skopeo", "umoci", "tar", "python3"] }))
    return;
  const down = new Teardown(t);
  const names = await testNames();
  const x = names.octet;
  const bridge = `${names.namePrefix}pb`;
  const gateway = `10.214.${x}.1`;
  const ip = (...args: string[]) => exec("ip", args);

  // The bridge the hosts share; the registry's proxy listens on its address.
  down.defer(() => ip("link", "del", bridge).catch(() => {}));
  await ip("link", "add", bridge, "type", "bridge");
  await ip("addr", "add", `${gateway}/24`, "dev", bridge);
  await ip("link", "set", bridge, "up");
  const hostAddr = (i: number) => `10.214.${x}.${11 + i}`;
  for (let i = 0; i < HOSTS; i++) {
    const ns = `${names.namePrefix}-h${i}`;
    const veth = `${names.namePrefix}h${i}`;
    down.defer(async () => {
      await ip("link", "del", veth).catch(() => {});
      await ip("netns", "del", ns).catch(() => {});
    });
    await ip("netns", "add", ns);
    await ip("-n", ns, "link", "set", "lo", "up");
    await ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns);
    await ip("link", "set", veth, "master", bridge);
    await ip("link", "set", veth, "up");
    await ip("-n", ns, "addr", "add", `${hostAddr(i)}/24`, "dev", "eth0");
    await ip("-n", ns, "link", "set", "eth0", "up");
  }

  const registry = await startTestRegistry(t);
  const blobGets = new Map<string, number>();
  const proxy = createServer((req, res) => {
    const m = /\/blobs\/(sha256:[0-9a-f]{64})$/.exec(req.url ?? "");
    if (m && req.method === "GET") blobGets.set(m[1] as string, (blobGets.get(m[1] as string) ?? 0) + 1);
    const up = request(
      { host: "127.0.0.1", port: registry.port, method: req.method, path: req.url, headers: req.headers },
      (r) => {
        res.writeHead(r.statusCode ?? 502, r.headers);
        r.pipe(res);
      },
    );
    up.once("error", () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((r) => proxy.listen(0, gateway, r));
  down.defer(() => new Promise<void>((r) => proxy.close(() => r())));
  const proxyHost = `${gateway}:${(proxy.address() as AddressInfo).port}`;

  // A new image: a base and three layers of random bytes.
  const work = tempDir(t, "berth-peer-netns-");
  const src = new ImageStore({ root: join(work, "src"), clusterRegistry: { host: registry.host } });
  const rootfs = join(work, "rootfs");
  mkdirSync(join(rootfs, "etc"), { recursive: true });
  writeFileSync(join(rootfs, "etc", "base.txt"), "base\n");
  let img = await src.importRootfs(rootfs, { name: "localhost/peer-netns:base" });
  for (const [i, size] of [4, 6, 8].entries())
    img = await src.commitLayer(img.ref, layerTar(work, `l${i}`, size * MiB), {
      name: `localhost/peer-netns:l${i}`,
    });
  const pushed = await src.pushToCluster(img.ref, { repository: "berth/peer-netns", tag: "v1" });
  const ref = pushed.replace(registry.host, proxyHost);

  const pki = await ClusterPki.load(memoryStore());
  const peers = Array.from({ length: HOSTS }, (_, i) => ({
    agentId: `agent-ns-${i}`,
    address: `${hostAddr(i)}:${TUNNEL_PORT}`,
  }));
  const hosts = await Promise.all(
    peers.map(async (peer, i) => {
      const cert = await pki.issueAgentCert(peer.agentId);
      const config = join(work, `${peer.agentId}.json`);
      writeFileSync(
        config,
        JSON.stringify({
          agentId: peer.agentId,
          root: join(work, peer.agentId),
          host: hostAddr(i),
          port: TUNNEL_PORT,
          registry: proxyHost,
          ref,
          peers,
          tls: { caPem: pki.caPem, ...cert },
        }),
        { mode: 0o600 },
      );
      // As spawnIn, with a stdin to tell the host when to pull.
      const child = spawn(
        "ip",
        [
          "netns",
          "exec",
          `${names.namePrefix}-h${i}`,
          process.execPath,
          "--import",
          "tsx",
          HOST_SCRIPT,
          config,
        ],
        { stdio: ["pipe", "pipe", "pipe"] },
      );
      down.defer(() => {
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      });
      child.stdin?.on("error", () => {});
      let stderr = "";
      child.stderr?.on("data", (b: Buffer) => {
        stderr = (stderr + b.toString()).slice(-4000);
      });
      const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream })[Symbol.asyncIterator]();
      const next = async (): Promise<string> => {
        const n = await lines.next();
        if (n.done) throw new Error(`host ${peer.agentId} ended: ${stderr}`);
        return n.value;
      };
      assert.equal(await next(), "ready");
      return { child, next };
    }),
  );
  // Stop the hosts before the namespaces go (Teardown runs last-in first).
  down.defer(() => {
    for (const h of hosts) h.child.stdin?.end("stop\n");
  });

  for (const h of hosts) h.child.stdin?.write("pull\n");
  const results = await Promise.all(
    hosts.map(async (h) => JSON.parse(await h.next()) as { digest?: string; error?: string }),
  );
  for (const r of results) assert.equal(r.digest, img.digest, JSON.stringify(r));

  const manifest = (await (
    await fetch(`${registry.url}/v2/berth/peer-netns/manifests/${img.digest}`, {
      headers: { accept: "application/vnd.oci.image.manifest.v1+json" },
    })
  ).json()) as { layers: { digest: string }[] };
  const counts = manifest.layers.map((l) => blobGets.get(l.digest) ?? 0);
  t.diagnostic(`registry blob GETs per layer: ${counts.join(", ")} (of ${HOSTS} hosts)`);
  assert.equal(counts.length, 4);
  for (const [i, n] of counts.entries()) {
    assert.ok(n >= 1, `layer ${i} came from the registry at least once`);
    assert.ok(n <= 2, `layer ${i} was served by the registry ${n} times: at most twice`);
  }
});
