// exposePort on a real container host (runc, network namespace, nftables),
// called over the agent's gRPC unix socket: a port the container was started
// without is refused by nftables and by the agent tunnel until exposePort
// opens it; then the host reaches it directly and through the tunnel, and
// the port stays open across an agent restart.

import assert from "node:assert/strict";
import { type Agent, request } from "node:http";
import { test } from "node:test";
import { TunnelServer, tunnelContainers } from "../../agent/proxy/index.ts";
import { ContainerTunnels } from "../../coordinator/containers/tunnels.ts";
import { COORDINATOR_CLIENT_NAME, ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { BerthError } from "../../shared/errors.ts";
import { connectAttempt, waitFor } from "../../shared/net.ts";
import { needs } from "../helpers/env.ts";
import { realAgent } from "../helpers/real-agent.ts";
import { execAll, HOST_COMMANDS, MiB } from "./harness.ts";
import { memoryStore } from "../helpers/store.ts";

const AGENT_ID = "agent-expose";
const PORT = 8000;

const isBerth = (code: string, re: RegExp) => (e: unknown) => {
  assert.ok(e instanceof BerthError, String(e));
  assert.equal(e.code, code, e.message);
  assert.match(e.message, re);
  return true;
};

/** GET / on the container's server: the status code. */
function get(opts: { host: string; port?: number; agent?: Agent }): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request({ ...opts, path: "/", method: "GET" }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.on("error", reject);
    req.end();
  });
}

/** One TCP connect from the host's own namespace: "connected", or the error it got. */
async function connectFromHost(ipv4: string): Promise<string> {
  const r = await connectAttempt(ipv4, PORT, 10_000);
  if (r === "timeout") return "timeout";
  if (r instanceof Error) return r.message;
  r.destroy();
  return "connected";
}

test("exposePort opens a running container's port to the host and the tunnel", {
  timeout: 300_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const { h, client } = await realAgent(t);

  const pki = await ClusterPki.load(memoryStore());
  const tunnel = await TunnelServer.start({
    host: "127.0.0.1",
    port: 0,
    tls: { caPem: pki.caPem, ...(await pki.issueAgentCert(AGENT_ID)) },
    // Looked up on h.host at each connection: the host after a restart too.
    containers: tunnelContainers({ getContainer: (id) => h.host.getContainer(id) }),
    allowedClientNames: [COORDINATOR_CLIENT_NAME],
  });
  t.after(() => tunnel.stop());
  const fleet = { get: () => ({ heartbeat: { proxyAddress: `127.0.0.1:${tunnel.port}` } }) };
  const tunnels = await ContainerTunnels.create({ fleet, pki });
  t.after(() => tunnels.close());

  const c = await client.runContainer({
    image: h.imageRef,
    cpu: 0.25,
    memoryBytes: 128 * MiB,
    args: ["python3", "-m", "http.server", String(PORT)],
  });
  t.after(() => h.host.stopContainer(c.id, { graceMs: 0, remove: true }).catch(() => {}));
  assert.deepEqual(c.exposedPorts, []);
  const ipv4 = c.ipv4;
  assert.ok(ipv4, "the container has an address");

  // The server listens (seen from inside), so a refusal below is the firewall's.
  const inside = `import socket; socket.create_connection(("127.0.0.1", ${PORT}), 2).close()`;
  await waitFor(
    async () => (await execAll(await client.exec(c.id, { args: ["python3", "-c", inside] }))).code === 0,
    {
      timeoutMs: 60_000,
      intervalMs: 200,
      what: "the container's server to listen",
    },
  );

  const before = await connectFromHost(ipv4);
  assert.notEqual(before, "connected", "nftables lets the host in before exposePort");
  assert.notEqual(before, "timeout", "nftables rejects (it does not drop) a port not exposed");
  await assert.rejects(tunnels.connect(AGENT_ID, c.id, PORT), isBerth("failed_precondition", /not exposed/));

  const opened = await client.exposePort(c.id, PORT);
  assert.deepEqual(opened.exposedPorts, [PORT]);
  assert.equal(opened.state, "running");
  // Again: nothing changes.
  assert.deepEqual((await client.exposePort(c.id, PORT)).exposedPorts, [PORT]);
  assert.deepEqual((await client.getContainer(c.id)).exposedPorts, [PORT]);

  assert.equal(await connectFromHost(ipv4), "connected");
  assert.equal(await get({ host: ipv4, port: PORT }), 200);
  assert.equal(await get({ host: "container", agent: tunnels.httpAgent(AGENT_ID, c.id, PORT) }), 200);

  // The host itself checks the port (the gRPC client refuses bad ones before sending).
  for (const bad of [0, 65536, 1.5]) {
    await assert.rejects(h.host.exposePort(c.id, bad), isBerth("invalid_request", /1\.\.65535/));
  }
  await assert.rejects(client.exposePort("ctr-none", PORT), isBerth("not_found", /ctr-none/));

  // The port is in the host record: a restarted agent still lists it, and the rule is still there.
  const restarted = await h.restart();
  assert.deepEqual((await restarted.getContainer(c.id)).exposedPorts, [PORT]);
  assert.equal(await connectFromHost(ipv4), "connected");
  assert.equal(await get({ host: "container", agent: tunnels.httpAgent(AGENT_ID, c.id, PORT) }), 200);

  await restarted.stopContainer(c.id, { graceMs: 0 });
  await assert.rejects(restarted.exposePort(c.id, 9000), isBerth("failed_precondition", /not running/));
});
