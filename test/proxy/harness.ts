// The agent-tunnel test rig shared by test/proxy/*.test.ts: a real cluster
// PKI, the agent's TunnelServer in front of real local servers standing in for
// container ports, and the coordinator's ContainerTunnels dialling it through
// a FleetView fed a heartbeat.

import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer as createHttpServer, request, type Agent, type Server as HttpServer } from "node:http";
import type { Duplex } from "node:stream";
import type { TestContext } from "node:test";
import { TunnelServer, type TunnelContainer } from "../../agent/proxy/index.ts";
import { ContainerTunnels, type ContainerTunnelsOptions } from "../../coordinator/containers/tunnels.ts";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { COORDINATOR_CLIENT_NAME, ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { BerthError } from "../../shared/errors.ts";
import { capacity } from "../containers/fakes.ts";
import { memoryStore } from "../helpers/store.ts";

export const AGENT_ID = "agent-tun1";

export const isBerth = (code: string, message: RegExp) => (e: unknown) => {
  assert.ok(e instanceof BerthError, `expected a BerthError, got ${String(e)}`);
  assert.equal(e.code, code, e.message);
  assert.match(e.message, message);
  return true;
};

export interface Rig {
  pki: ClusterPki;
  server: TunnelServer;
  tunnels: ContainerTunnels;
  fleet: FleetView;
  containers: Map<string, TunnelContainer>;
}

/** Extra ContainerTunnels options, and the host id the agent's heartbeat reports. */
export interface RigOptions {
  tunnels?: Pick<ContainerTunnelsOptions, "localHostId" | "addresses" | "retryIntervalMs">;
  hostId?: string;
}

export async function rig(t: TestContext, o: RigOptions = {}): Promise<Rig> {
  const pki = await ClusterPki.load(memoryStore());
  const containers = new Map<string, TunnelContainer>();
  const server = await TunnelServer.start({
    host: "127.0.0.1",
    port: 0,
    // Dialled by IP, verified by agent id: the certificate names only the id.
    tls: { caPem: pki.caPem, ...(await pki.issueAgentCert(AGENT_ID)) },
    containers: { lookup: (id) => containers.get(id) },
    allowedClientNames: [COORDINATOR_CLIENT_NAME],
  });
  t.after(() => server.stop());
  const fleet = new FleetView();
  fleet.observe(
    {
      agentId: AGENT_ID,
      hostname: "h",
      version: "t",
      sentAt: 0,
      intervalMs: 1000,
      grpcAddress: "127.0.0.1:1",
      proxyAddress: `127.0.0.1:${server.port}`,
      ...(o.hostId ? { hostId: o.hostId } : {}),
      capacity: capacity(1, 1),
    },
    Date.now(),
  );
  const tunnels = await ContainerTunnels.create({ fleet, pki, ...o.tunnels });
  t.after(() => tunnels.close());
  return { pki, server, tunnels, fleet, containers };
}

export async function listen(t: TestContext, server: HttpServer, port = 0): Promise<number> {
  server.listen(port, "127.0.0.1");
  await once(server, "listening");
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as { port: number }).port;
}

/** A real HTTP server answering with the path and body it got; counts the connections it accepted. */
export async function echoHttp(
  t: TestContext,
  port = 0,
): Promise<{ port: number; connections: () => number }> {
  let connections = 0;
  const server = createHttpServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ method: req.method, path: req.url, body: Buffer.concat(chunks).toString() }));
    });
  });
  server.on("connection", () => connections++);
  return { port: await listen(t, server, port), connections: () => connections };
}

export function call(
  agent: Agent,
  path: string,
  body: string,
): Promise<{ status: number; json: Record<string, unknown>; reused: boolean }> {
  return new Promise((resolve, reject) => {
    const req = request({ agent, host: "container", method: "POST", path }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          json: JSON.parse(Buffer.concat(chunks).toString()),
          reused: req.reusedSocket,
        }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

/** Reads from a stream until `text` has arrived (leaving it open); returns everything read. */
export function readUntil(s: Duplex, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = "";
    const done = (err?: Error) => {
      s.off("data", onData);
      s.off("end", onEnd);
      s.off("error", done);
      if (err) reject(err);
      else resolve(got);
    };
    const onData = (chunk: Buffer) => {
      got += String(chunk);
      if (got.includes(text)) done();
    };
    const onEnd = () =>
      done(new Error(`stream ended before ${JSON.stringify(text)}; got ${JSON.stringify(got)}`));
    s.on("data", onData);
    s.on("end", onEnd);
    s.on("error", done);
  });
}
