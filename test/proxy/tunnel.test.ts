// The agent tunnel end to end over real mutual TLS with a real cluster PKI:
// the agent's TunnelServer in front of real local servers standing in for
// container ports, the coordinator's ContainerTunnels dialling it through a
// FleetView fed a heartbeat (the rig: harness.ts).

import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer as createHttpServer } from "node:http";
import type { Duplex } from "node:stream";
import { connect as tlsConnect } from "node:tls";
import { test } from "node:test";
import { ContainerTunnels } from "../../coordinator/containers/tunnels.ts";
import { ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { freePort } from "../../shared/net.ts";
import { memoryStore } from "../helpers/store.ts";
import { AGENT_ID, call, echoHttp, isBerth, listen, readUntil, rig } from "./harness.ts";

test("keep-alive HTTP requests through the container's http.Agent reuse one tunnel", async (t) => {
  const r = await rig(t);
  const upstream = await echoHttp(t);
  r.containers.set("ctr-web1", { state: "running", ipv4: "127.0.0.1", exposedPorts: [upstream.port] });

  const agent = r.tunnels.httpAgent(AGENT_ID, "ctr-web1", upstream.port);
  assert.equal(r.tunnels.httpAgent(AGENT_ID, "ctr-web1", upstream.port), agent, "cached per container port");
  const first = await call(agent, "/hello?x=1", '{"a":1}');
  assert.deepEqual(first, {
    status: 200,
    json: { method: "POST", path: "/hello?x=1", body: '{"a":1}' },
    reused: false,
  });
  const second = await call(agent, "/again", "b");
  assert.equal(second.status, 200);
  assert.equal(second.json.path, "/again");
  assert.equal(second.reused, true, "the second request went over the kept-alive tunnel");
  assert.equal(upstream.connections(), 1);
  assert.equal(r.server.openTunnels, 1);

  // forget() drops the container's agent and its sockets.
  r.tunnels.forget("ctr-web1");
  assert.notEqual(r.tunnels.httpAgent(AGENT_ID, "ctr-web1", upstream.port), agent);
});

test("connect() gives a raw bidirectional pipe: an upgraded connection with half-close", async (t) => {
  const r = await rig(t);
  const server = createHttpServer(() => {});
  server.on("upgrade", (_req, socket: Duplex, head: Buffer) => {
    socket.write("HTTP/1.1 101 Switching Protocols\r\nUpgrade: shout\r\nConnection: Upgrade\r\n\r\n");
    if (head.length > 0) socket.write(head.toString().toUpperCase());
    socket.on("data", (c: Buffer) => socket.write(c.toString().toUpperCase()));
    // After the caller's FIN the server still answers: the tunnel passed the half-close on.
    socket.on("end", () => socket.end("bye"));
  });
  const port = await listen(t, server);
  r.containers.set("ctr-ws1", { state: "running", ipv4: "127.0.0.1", exposedPorts: [port] });

  const s = await r.tunnels.connect(AGENT_ID, "ctr-ws1", port);
  t.after(() => s.destroy());
  s.write("GET / HTTP/1.1\r\nHost: c\r\nUpgrade: shout\r\nConnection: Upgrade\r\n\r\n");
  assert.match(await readUntil(s, "\r\n\r\n"), /^HTTP\/1\.1 101 /);
  s.write("hello");
  assert.equal(await readUntil(s, "HELLO"), "HELLO");
  s.write("again");
  assert.equal(await readUntil(s, "AGAIN"), "AGAIN");
  s.end();
  let tail = "";
  s.on("data", (c: Buffer) => {
    tail += String(c);
  });
  await once(s, "end");
  assert.equal(tail, "bye");
});

test("unknown container, unexposed port and stopped container are refused with their cause", async (t) => {
  const r = await rig(t);
  const upstream = await echoHttp(t);
  r.containers.set("ctr-a", { state: "running", ipv4: "127.0.0.1", exposedPorts: [upstream.port] });
  r.containers.set("ctr-gone", { state: "stopped", exposedPorts: [upstream.port] });

  await assert.rejects(
    r.tunnels.connect(AGENT_ID, "ctr-nope", upstream.port),
    isBerth("not_found", /^agent agent-tun1: container ctr-nope is not on this agent$/),
  );
  await assert.rejects(
    r.tunnels.connect(AGENT_ID, "ctr-a", 9),
    isBerth(
      "failed_precondition",
      new RegExp(`port 9 of container ctr-a is not exposed \\(exposed: ${upstream.port}\\)`),
    ),
  );
  await assert.rejects(
    r.tunnels.connect(AGENT_ID, "ctr-gone", upstream.port),
    isBerth("failed_precondition", /container ctr-gone is not running/),
  );
  // The http.Agent's request fails with the same error.
  const agent = r.tunnels.httpAgent(AGENT_ID, "ctr-nope", upstream.port);
  await assert.rejects(call(agent, "/", ""), isBerth("not_found", /ctr-nope is not on this agent/));
  await assert.rejects(
    r.tunnels.connect("agent-unknown", "ctr-a", upstream.port),
    isBerth("unavailable", /agent agent-unknown has not reported a tunnel address/),
  );
});

test("a port that starts listening late is reached: refused connections are retried", async (t) => {
  const r = await rig(t);
  const port = await freePort();
  r.containers.set("ctr-slow", { state: "running", ipv4: "127.0.0.1", exposedPorts: [port] });
  const agent = r.tunnels.httpAgent(AGENT_ID, "ctr-slow", port);
  const answered = call(agent, "/late", "x");
  await new Promise((resolve) => setTimeout(resolve, 300));
  await echoHttp(t, port);
  const res = await answered;
  assert.equal(res.status, 200);
  assert.equal(res.json.path, "/late");
});

test("nothing listening before the deadline is unavailable; a container stopping meanwhile ends the wait", async (t) => {
  const r = await rig(t);
  const port = await freePort();
  r.containers.set("ctr-mute", { state: "running", ipv4: "127.0.0.1", exposedPorts: [port] });
  await assert.rejects(
    r.tunnels.connect(AGENT_ID, "ctr-mute", port, { timeoutMs: 200 }),
    isBerth("unavailable", new RegExp(`port ${port} of container ctr-mute was not listening within 200 ms`)),
  );

  const waiting = r.tunnels.connect(AGENT_ID, "ctr-mute", port, { timeoutMs: 60_000 });
  setTimeout(() => r.containers.set("ctr-mute", { state: "stopped", exposedPorts: [port] }), 200);
  await assert.rejects(waiting, isBerth("failed_precondition", /container ctr-mute is not running/));
});

test("a caller's abort signal cancels a connect that is still waiting", async (t) => {
  const r = await rig(t);
  const port = await freePort();
  r.containers.set("ctr-wait", { state: "running", ipv4: "127.0.0.1", exposedPorts: [port] });
  const ac = new AbortController();
  const waiting = r.tunnels.connect(AGENT_ID, "ctr-wait", port, { timeoutMs: 60_000, signal: ac.signal });
  setTimeout(() => ac.abort(new Error("caller went away")), 100);
  await assert.rejects(waiting, /caller went away/);
});

test("only coordinators with a cluster certificate get through, to the agent named by the heartbeat", async (t) => {
  const r = await rig(t);
  const upstream = await echoHttp(t);
  r.containers.set("ctr-sec", { state: "running", ipv4: "127.0.0.1", exposedPorts: [upstream.port] });

  // No client certificate: the handshake is refused, no CONNECT is answered.
  const bare = tlsConnect({ host: "127.0.0.1", port: r.server.port, ca: r.pki.caPem, servername: AGENT_ID });
  bare.on("error", () => {});
  bare.write(`CONNECT ctr-sec:${upstream.port} HTTP/1.1\r\n\r\n`);
  let got = "";
  bare.on("data", (c: Buffer) => {
    got += String(c);
  });
  await new Promise((resolve) => bare.once("close", resolve));
  assert.equal(got, "");

  // A certificate from another CA.
  const otherPki = await ClusterPki.load(memoryStore());
  const foreign = new ContainerTunnels({
    fleet: r.fleet,
    tls: { caPem: r.pki.caPem, ...(await otherPki.issueCoordinatorClientCert()) },
  });
  t.after(() => foreign.close());
  await assert.rejects(foreign.connect(AGENT_ID, "ctr-sec", upstream.port), isBerth("unavailable", /tunnel/));

  // A cluster certificate that is not the coordinator's (another agent's).
  const asAgent = new ContainerTunnels({
    fleet: r.fleet,
    tls: { caPem: r.pki.caPem, ...(await r.pki.issueAgentCert("agent-other")) },
  });
  t.after(() => asAgent.close());
  await assert.rejects(
    asAgent.connect(AGENT_ID, "ctr-sec", upstream.port),
    isBerth("permission_denied", /client certificate agent-other may not open tunnels/),
  );

  // The heartbeat says another agent listens there: its certificate does not match.
  const heartbeat = r.fleet.get(AGENT_ID)?.heartbeat;
  assert.ok(heartbeat);
  r.fleet.observe({ ...heartbeat, agentId: "agent-imposter" }, Date.now());
  await assert.rejects(
    r.tunnels.connect("agent-imposter", "ctr-sec", upstream.port),
    isBerth("unavailable", /cannot reach agent agent-imposter's tunnel/),
  );
  assert.equal(upstream.connections(), 0);
});

test("stop() closes open tunnels and the listener", async (t) => {
  const r = await rig(t);
  const upstream = await echoHttp(t);
  r.containers.set("ctr-stop", { state: "running", ipv4: "127.0.0.1", exposedPorts: [upstream.port] });
  const s = await r.tunnels.connect(AGENT_ID, "ctr-stop", upstream.port);
  s.on("error", () => {});
  const closed = once(s, "close");
  await r.server.stop();
  await closed;
  assert.equal(r.server.openTunnels, 0);
  await assert.rejects(
    r.tunnels.connect(AGENT_ID, "ctr-stop", upstream.port),
    isBerth("unavailable", /cannot reach agent agent-tun1's tunnel .*ECONNREFUSED/),
  );
});
