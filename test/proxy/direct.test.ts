// The same-host shortcut of ContainerTunnels: an agent whose heartbeat
// reports the coordinator's own host id has its containers dialled at their
// address (from ContainerAddresses, asking a fake agent API) with plain TCP;
// any other agent is reached through the real mutual-TLS tunnel of the rig.
// The rig's tunnel knows no containers unless a test adds them, so a request
// that went through it would fail: a 200 there proves the direct path.

import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer as createHttpServer } from "node:http";
import type { Duplex } from "node:stream";
import { type TestContext, test } from "node:test";
import type { ContainerStatus } from "../../api/index.ts";
import { ContainerAddresses } from "../../coordinator/containers/container-addresses.ts";
import { BerthError } from "../../shared/errors.ts";
import { freePort } from "../../shared/net.ts";
import { AGENT_ID, type Rig, call, echoHttp, isBerth, listen, readUntil, rig } from "./harness.ts";

const HOST = "host-coordinator-1";

/** The agents' GetContainer, from a map; counts the questions and can be made to fail. */
class FakeAgentApi {
  readonly containers = new Map<string, Partial<ContainerStatus>>();
  asked = 0;
  failWith?: Error;

  client(_agentId: string) {
    return {
      getContainer: async (id: string): Promise<ContainerStatus> => {
        this.asked++;
        if (this.failWith) throw this.failWith;
        const c = this.containers.get(id);
        if (!c) throw new BerthError("not_found", `container ${id} not found`);
        return {
          id,
          image: "i",
          imageDigest: "sha256:0",
          state: "running",
          pid: 1,
          createdAt: 0,
          labels: {},
          cpu: 1,
          memoryBytes: 1,
          gpus: [],
          egress: { mode: "open" },
          exposedPorts: [],
          ...c,
        };
      },
    };
  }
}

async function sameHostRig(
  t: TestContext,
  /** null: an agent that reports no host id (older agents). */
  agentHostId: string | null = HOST,
): Promise<Rig & { api: FakeAgentApi; addresses: ContainerAddresses }> {
  const api = new FakeAgentApi();
  const addresses = new ContainerAddresses({ agents: api });
  const r = await rig(t, {
    ...(agentHostId !== null ? { hostId: agentHostId } : {}),
    tunnels: { localHostId: HOST, addresses },
  });
  return { ...r, api, addresses };
}

test("same host: keep-alive requests go straight to the container's address, no tunnel", async (t) => {
  const r = await sameHostRig(t);
  const upstream = await echoHttp(t);
  r.api.containers.set("ctr-d1", { ipv4: "127.0.0.1", exposedPorts: [upstream.port] });

  const agent = r.tunnels.httpAgent(AGENT_ID, "ctr-d1", upstream.port);
  const first = await call(agent, "/hello?x=1", '{"a":1}');
  assert.deepEqual(first, {
    status: 200,
    json: { method: "POST", path: "/hello?x=1", body: '{"a":1}' },
    reused: false,
  });
  const second = await call(agent, "/again", "b");
  assert.equal(second.status, 200);
  assert.equal(second.json.path, "/again");
  assert.equal(second.reused, true, "the second request went over the kept-alive connection");
  assert.equal(upstream.connections(), 1);
  assert.equal(r.server.openTunnels, 0, "the agent's tunnel was not used");
  assert.equal(r.api.asked, 1, "the address was asked once");

  // forget() drops the sockets and the address: the next connection asks the agent again.
  r.tunnels.forget("ctr-d1");
  const third = await call(r.tunnels.httpAgent(AGENT_ID, "ctr-d1", upstream.port), "/third", "");
  assert.equal(third.status, 200);
  assert.equal(third.reused, false);
  assert.equal(upstream.connections(), 2);
  assert.equal(r.api.asked, 2);
});

test("same host: connect() gives a raw pipe to the container port", async (t) => {
  const r = await sameHostRig(t);
  const server = createHttpServer(() => {});
  server.on("upgrade", (_req, socket: Duplex) => {
    socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: shout\r\nConnection: Upgrade\r\n\r\n");
    socket.on("data", (c: Buffer) => socket.write(c.toString().toUpperCase()));
    socket.on("end", () => socket.end("bye"));
  });
  const port = await listen(t, server);
  r.api.containers.set("ctr-ws", { ipv4: "127.0.0.1", exposedPorts: [port] });

  const s = await r.tunnels.connect(AGENT_ID, "ctr-ws", port);
  t.after(() => s.destroy());
  s.write("GET / HTTP/1.1\r\nHost: c\r\nUpgrade: shout\r\nConnection: Upgrade\r\n\r\n");
  assert.match(await readUntil(s, "\r\n\r\n"), /^HTTP\/1\.1 101 /);
  s.write("hello");
  assert.equal(await readUntil(s, "HELLO"), "HELLO");
  s.end();
  let tail = "";
  s.on("data", (c: Buffer) => {
    tail += String(c);
  });
  await once(s, "end");
  assert.equal(tail, "bye");
  assert.equal(r.server.openTunnels, 0);
});

test("same host: a server that starts late is reached; none before the deadline is unavailable", async (t) => {
  const r = await sameHostRig(t);
  const port = await freePort();
  r.api.containers.set("ctr-slow", { ipv4: "127.0.0.1", exposedPorts: [port] });

  await assert.rejects(
    r.tunnels.connect(AGENT_ID, "ctr-slow", port, { timeoutMs: 200 }),
    isBerth(
      "unavailable",
      new RegExp(`^port ${port} of container ctr-slow was not listening within 200 ms$`),
    ),
  );

  const answered = call(r.tunnels.httpAgent(AGENT_ID, "ctr-slow", port), "/late", "x");
  await new Promise((resolve) => setTimeout(resolve, 300));
  await echoHttp(t, port);
  const res = await answered;
  assert.equal(res.status, 200);
  assert.equal(res.json.path, "/late");
  assert.equal(r.server.openTunnels, 0);
});

test("same host: a caller's abort signal cancels a connect that is still waiting", async (t) => {
  const r = await sameHostRig(t);
  const port = await freePort();
  r.api.containers.set("ctr-wait", { ipv4: "127.0.0.1", exposedPorts: [port] });
  const ac = new AbortController();
  const waiting = r.tunnels.connect(AGENT_ID, "ctr-wait", port, { timeoutMs: 60_000, signal: ac.signal });
  setTimeout(() => ac.abort(new Error("caller went away")), 100);
  await assert.rejects(waiting, /caller went away/);
});

test("another host's agent is reached through its TLS tunnel, its addresses never asked", async (t) => {
  for (const agentHostId of ["host-elsewhere", null]) {
    const r = await sameHostRig(t, agentHostId);
    const upstream = await echoHttp(t);
    r.api.containers.set("ctr-far", { ipv4: "127.0.0.1", exposedPorts: [upstream.port] });
    r.containers.set("ctr-far", { state: "running", ipv4: "127.0.0.1", exposedPorts: [upstream.port] });

    const agent = r.tunnels.httpAgent(AGENT_ID, "ctr-far", upstream.port);
    assert.equal((await call(agent, "/a", "")).status, 200);
    assert.equal((await call(agent, "/b", "")).reused, true);
    assert.equal(r.server.openTunnels, 1, `through the tunnel (agent host id ${agentHostId})`);
    assert.equal(r.api.asked, 0);
  }
});

test("same host, but no usable address: the tunnel is taken and answers with its cause", async (t) => {
  const r = await sameHostRig(t);
  const upstream = await echoHttp(t);
  // Not running yet, by the agent's API: the tunnel (which knows it running) carries it.
  r.api.containers.set("ctr-new", { state: "created", exposedPorts: [upstream.port] });
  r.containers.set("ctr-new", { state: "running", ipv4: "127.0.0.1", exposedPorts: [upstream.port] });
  const s = await r.tunnels.connect(AGENT_ID, "ctr-new", upstream.port);
  s.destroy();
  assert.equal(r.server.openTunnels, 1);

  // A port the container does not expose: the tunnel's refusal, not a connect error.
  r.api.containers.set("ctr-a", { ipv4: "127.0.0.1", exposedPorts: [upstream.port] });
  r.containers.set("ctr-a", { state: "running", ipv4: "127.0.0.1", exposedPorts: [upstream.port] });
  await assert.rejects(
    r.tunnels.connect(AGENT_ID, "ctr-a", 9),
    isBerth("failed_precondition", /port 9 of container ctr-a is not exposed/),
  );

  // Unknown to the agent's API and to its tunnel.
  await assert.rejects(
    r.tunnels.connect(AGENT_ID, "ctr-nope", upstream.port),
    isBerth("not_found", /container ctr-nope is not on this agent/),
  );
});

test("ContainerAddresses keeps running containers' addresses only, per agent, until forget()", async () => {
  const api = new FakeAgentApi();
  const addresses = new ContainerAddresses({ agents: api, maxEntries: 2 });
  api.containers.set("c1", { ipv4: "10.0.0.1", exposedPorts: [8000] });
  api.containers.set("c2", { state: "created", exposedPorts: [8000] });

  assert.equal(await addresses.lookup("a1", "c1", 8000), "10.0.0.1");
  assert.equal(await addresses.lookup("a1", "c1", 8000), "10.0.0.1");
  assert.equal(await addresses.lookup("a1", "c1", 9000), undefined, "an unexposed port has no address");
  assert.equal(api.asked, 1, "one question for all three");

  // Not running: not kept, asked again.
  assert.equal(await addresses.lookup("a1", "c2", 8000), undefined);
  api.containers.set("c2", { ipv4: "10.0.0.2", exposedPorts: [8000] });
  assert.equal(await addresses.lookup("a1", "c2", 8000), "10.0.0.2");
  assert.equal(api.asked, 3);

  // The agent cannot be asked: undefined, not kept.
  api.failWith = new Error("agent down");
  assert.equal(await addresses.lookup("a1", "c3", 8000), undefined);
  api.failWith = undefined;

  // Another agent claiming the container is asked itself.
  assert.equal(await addresses.lookup("a2", "c1", 8000), "10.0.0.1");
  assert.equal(api.asked, 5);

  addresses.forget("c1");
  assert.equal(await addresses.lookup("a2", "c1", 8000), "10.0.0.1");
  assert.equal(api.asked, 6);

  // Past maxEntries the oldest (c2) goes.
  api.containers.set("c4", { ipv4: "10.0.0.4", exposedPorts: [8000] });
  assert.equal(await addresses.lookup("a1", "c4", 8000), "10.0.0.4");
  assert.equal(await addresses.lookup("a1", "c2", 8000), "10.0.0.2");
  assert.equal(api.asked, 8);
});
