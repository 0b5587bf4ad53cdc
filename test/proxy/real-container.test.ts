// The agent tunnel in front of a real container host (runc, network
// namespace, nftables inbound rules): the coordinator's http.Agent reaches an
// HTTP server in a container through the exposed port, waiting while the
// server starts; an unexposed port and a stopped container are refused. A
// coordinator on the same host reaches the port directly, without the tunnel.

import assert from "node:assert/strict";
import { request } from "node:http";
import { test } from "node:test";
import { TunnelServer, tunnelContainers } from "../../agent/proxy/index.ts";
import { ContainerAddresses } from "../../coordinator/containers/container-addresses.ts";
import { ContainerTunnels } from "../../coordinator/containers/tunnels.ts";
import { COORDINATOR_CLIENT_NAME, ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { BerthError } from "../../shared/errors.ts";
import { needs } from "../helpers/env.ts";
import { HOST_COMMANDS, MiB, hostHarness } from "../host/harness.ts";
import { memoryStore } from "../helpers/store.ts";

const AGENT_ID = "agent-tunreal";
const HOST_ID = "host-tunreal";

// The server starts a second late, so the first connections are refused and retried.
const SERVE = [
  "python3",
  "-c",
  [
    "import time, http.server",
    "time.sleep(1)",
    "class H(http.server.BaseHTTPRequestHandler):",
    "    protocol_version = 'HTTP/1.1'",
    "    def do_GET(self):",
    "        body = ('hello from ' + self.path).encode()",
    "        self.send_response(200)",
    "        self.send_header('content-length', str(len(body)))",
    "        self.end_headers()",
    "        self.wfile.write(body)",
    "http.server.HTTPServer(('0.0.0.0', 8000), H).serve_forever()",
  ].join("\n"),
];

test("a real container's exposed port through the agent tunnel", { timeout: 300_000 }, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const h = await hostHarness(t);
  const pki = await ClusterPki.load(memoryStore());
  const server = await TunnelServer.start({
    host: "127.0.0.1",
    port: 0,
    tls: { caPem: pki.caPem, ...(await pki.issueAgentCert(AGENT_ID)) },
    containers: tunnelContainers(h.host),
    allowedClientNames: [COORDINATOR_CLIENT_NAME],
  });
  t.after(() => server.stop());
  const fleet = { get: () => ({ heartbeat: { proxyAddress: `127.0.0.1:${server.port}` } }) };
  const tunnels = await ContainerTunnels.create({ fleet, pki });
  t.after(() => tunnels.close());

  const c = await h.host.runContainer({
    image: h.imageRef,
    cpu: 0.25,
    memoryBytes: 128 * MiB,
    args: SERVE,
    exposedPorts: [8000],
  });
  t.after(() => h.host.stopContainer(c.id, { graceMs: 0, remove: true }).catch(() => {}));

  const agent = tunnels.httpAgent(AGENT_ID, c.id, 8000);
  const body = await new Promise<string>((resolve, reject) => {
    const req = request({ agent, host: "container", path: "/ping" }, (res) => {
      let text = "";
      res.on("data", (chunk: Buffer) => {
        text += String(chunk);
      });
      res.on("end", () =>
        res.statusCode === 200 ? resolve(text) : reject(new Error(`status ${res.statusCode}`)),
      );
    });
    req.on("error", reject);
    req.end();
  });
  assert.equal(body, "hello from /ping");

  const refused = (code: string, re: RegExp) => (e: unknown) =>
    e instanceof BerthError && e.code === code && re.test(e.message);
  await assert.rejects(
    tunnels.connect(AGENT_ID, c.id, 8001),
    refused("failed_precondition", /port 8001 .* is not exposed/),
  );
  await h.host.stopContainer(c.id, { graceMs: 0 });
  await assert.rejects(
    tunnels.connect(AGENT_ID, c.id, 8000),
    refused("failed_precondition", /is not running/),
  );
  await assert.rejects(
    tunnels.connect(AGENT_ID, "ctr-none", 8000),
    refused("not_found", /not on this agent/),
  );
});

test("a coordinator on the agent's host reaches a real container's port directly", {
  timeout: 300_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const h = await hostHarness(t);
  const pki = await ClusterPki.load(memoryStore());
  const server = await TunnelServer.start({
    host: "127.0.0.1",
    port: 0,
    tls: { caPem: pki.caPem, ...(await pki.issueAgentCert(AGENT_ID)) },
    containers: tunnelContainers(h.host),
    allowedClientNames: [COORDINATOR_CLIENT_NAME],
  });
  t.after(() => server.stop());
  const fleet = {
    get: () => ({ heartbeat: { proxyAddress: `127.0.0.1:${server.port}`, hostId: HOST_ID } }),
  };
  const tunnels = await ContainerTunnels.create({
    fleet,
    pki,
    localHostId: HOST_ID,
    addresses: new ContainerAddresses({ agents: { client: () => h.host } }),
  });
  t.after(() => tunnels.close());

  const c = await h.host.runContainer({
    image: h.imageRef,
    cpu: 0.25,
    memoryBytes: 128 * MiB,
    args: SERVE,
    exposedPorts: [8000],
  });
  t.after(() => h.host.stopContainer(c.id, { graceMs: 0, remove: true }).catch(() => {}));

  // The server starts a second late: the host's connections are refused (not dropped) and retried.
  const agent = tunnels.httpAgent(AGENT_ID, c.id, 8000);
  const get = (path: string) =>
    new Promise<{ body: string; reused: boolean }>((resolve, reject) => {
      const req = request({ agent, host: "container", path }, (res) => {
        let text = "";
        res.on("data", (chunk: Buffer) => {
          text += String(chunk);
        });
        res.on("end", () => resolve({ body: text, reused: req.reusedSocket }));
      });
      req.on("error", reject);
      req.end();
    });
  assert.deepEqual(await get("/one"), { body: "hello from /one", reused: false });
  assert.deepEqual(await get("/two"), { body: "hello from /two", reused: true });
  assert.equal(server.openTunnels, 0, "the agent's tunnel was not used");

  // An unexposed port is not dialled directly: the tunnel refuses it with its cause.
  await assert.rejects(
    tunnels.connect(AGENT_ID, c.id, 8001),
    (e: unknown) =>
      e instanceof BerthError && e.code === "failed_precondition" && /not exposed/.test(e.message),
  );
});
