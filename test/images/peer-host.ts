// One test host of test/images/peer-layers-netns.test.ts, run inside its own
// network namespace: an image store with its peers, its blob server on the
// agent tunnel at its namespace's address, and one pull when told "pull" on
// stdin. Prints "ready" once it listens and the pulled image as JSON.

import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { type BlobPeer, ImageStore, PeerBlobs, serveBlob } from "../../agent/images/index.ts";
import { TunnelServer } from "../../agent/proxy/index.ts";
import { COORDINATOR_CLIENT_NAME } from "../../shared/cluster-names.ts";

interface HostConfig {
  agentId: string;
  root: string;
  host: string;
  port: number;
  registry: string;
  ref: string;
  peers: BlobPeer[];
  tls: { caPem: string; certPem: string; keyPem: string };
}

const c = JSON.parse(readFileSync(process.argv[2] as string, "utf8")) as HostConfig;
const peerBlobs = new PeerBlobs({ self: c.agentId, peers: async () => c.peers, tls: c.tls });
const store = new ImageStore({
  root: c.root,
  clusterRegistry: { host: c.registry, insecure: true },
  peerBlobs,
});
const holder = store.blobHolder();
if (!holder) throw new Error("no blob holder");
const tunnel = await TunnelServer.start({
  host: c.host,
  port: c.port,
  tls: c.tls,
  containers: { lookup: () => undefined },
  allowedClientNames: [COORDINATOR_CLIENT_NAME],
  requests: (req, res) => serveBlob(req, res, holder),
});
process.stdout.write("ready\n");
for await (const line of createInterface({ input: process.stdin })) {
  if (line === "pull") {
    try {
      const info = await store.pull(c.ref);
      process.stdout.write(`${JSON.stringify({ digest: info.digest, layers: info.layers })}\n`);
    } catch (e) {
      process.stdout.write(`${JSON.stringify({ error: (e as Error).message })}\n`);
    }
  }
  if (line === "stop") break;
}
await tunnel.stop();
