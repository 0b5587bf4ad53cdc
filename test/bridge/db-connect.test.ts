// A container's connection to its workspace's database over its agent
// socket (agent/bridge/db-connect.ts): the real bridge servers of
// TaskRunners on unix sockets, the real local dialer over the shared fake
// agent's containers (labels filtered as a real host filters them, the
// pod's address a loopback echo server standing in for the database).

import assert from "node:assert/strict";
import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { test } from "node:test";
import { localDatabaseDialer } from "../../agent/bridge/db-connect.ts";
import { RunnerBridges } from "../../agent/host/runner.ts";
import { TaskRunners } from "../../agent/tasks/runners.ts";
import { DatabaseLabels } from "../../shared/databases.ts";
import { RunnerLabels } from "../../shared/tasks.ts";
import { tempDir } from "../helpers/env.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";

/** A TCP server on loopback that answers each chunk with "echo:" and the chunk. */
async function echoServer(t: { after: (fn: () => unknown) => void }): Promise<number> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
    s.on("data", (d) => s.write(`echo:${d}`));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => {
    for (const s of sockets) s.destroy();
    return new Promise((r) => server.close(r));
  });
  return (server.address() as AddressInfo).port;
}

/** Sends the upgrade request; resolves with the answer's head and the socket (data after the head stays in it). */
function upgrade(
  sock: string,
  path: string,
  headers = "Upgrade: berth-tcp\r\nConnection: Upgrade\r\n",
): Promise<{ head: string; body: string; socket: Socket }> {
  return new Promise((resolve, reject) => {
    const s = connect(sock);
    let buf = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const end = buf.indexOf("\r\n\r\n");
      if (end < 0) return;
      const head = buf.subarray(0, end).toString();
      if (head.startsWith("HTTP/1.1 101")) {
        s.off("data", onData);
        resolve({ head, body: "", socket: s });
      } else {
        s.on("end", () => resolve({ head, body: buf.subarray(end + 4).toString(), socket: s }));
      }
    };
    s.on("data", onData);
    s.once("error", reject);
    s.write(`GET ${path} HTTP/1.1\r\nHost: bridge\r\n${headers}\r\n`);
  });
}

function roundTrip(s: Socket, text: string): Promise<string> {
  return new Promise((resolve) => {
    s.once("data", (d) => resolve(d.toString()));
    s.write(text);
  });
}

async function setup(t: { after: (fn: () => unknown) => void }) {
  const port = await echoServer(t);
  const agent = new FakeContainerApi({ statusDefaults: { ipv4: "127.0.0.1" } });
  const pod = (ws: string, localPort: number, id: string) =>
    agent.runContainer({
      id,
      args: ["postgres"],
      cpu: 1,
      memoryBytes: 256 * 1024 * 1024,
      labels: {
        [RunnerLabels.workspaceId]: ws,
        [DatabaseLabels.localPort]: String(localPort),
        [DatabaseLabels.serverPort]: String(port),
      },
    });
  const runners = new TaskRunners({ kill: async () => {}, dialDatabase: localDatabaseDialer(() => agent) });
  t.after(() => runners.stop());
  const bridges = new RunnerBridges(tempDir(t), runners);
  const socketOf = async (containerId: string, ws: string) =>
    join((await bridges.openWorkspace(containerId, ws)) as string, "agent.sock");
  return { agent, pod, socketOf };
}

test("an upgrade on the agent socket carries bytes to and from the workspace's database pod", async (t) => {
  const { pod, socketOf } = await setup(t);
  await pod("ws-a", 15432, "ctr-db");
  const sock = await socketOf("ctr-fn", "ws-a");
  const a = await upgrade(sock, "/v1/databases/15432/connect");
  assert.match(a.head, /^HTTP\/1\.1 101 Switching Protocols\r\nupgrade: berth-tcp/);
  assert.equal(await roundTrip(a.socket, "SELECT 1"), "echo:SELECT 1");
  // A second connection at the same time is its own.
  const b = await upgrade(sock, "/v1/databases/15432/connect");
  assert.equal(await roundTrip(b.socket, "two"), "echo:two");
  assert.equal(await roundTrip(a.socket, "one"), "echo:one");
  a.socket.destroy();
  b.socket.destroy();
});

test("scoped to the socket's workspace: another workspace's pod on the same local port is not found", async (t) => {
  const { pod, socketOf } = await setup(t);
  await pod("ws-b", 15432, "ctr-db-b");
  const r = await upgrade(await socketOf("ctr-fn", "ws-a"), "/v1/databases/15432/connect");
  assert.match(r.head, /^HTTP\/1\.1 404/);
  assert.equal(JSON.parse(r.body).error.code, "not_found");
  assert.match(JSON.parse(r.body).error.message, /no database of this workspace on local port 15432/);
});

test("a stopped pod, a bad route, a missing Upgrade header and an agent without a dialer are refused by name", async (t) => {
  const { agent, pod, socketOf } = await setup(t);
  await pod("ws-a", 15432, "ctr-db");
  await agent.stopContainer("ctr-db", { graceMs: 0 });
  const sock = await socketOf("ctr-fn", "ws-a");
  const stopped = await upgrade(sock, "/v1/databases/15432/connect");
  assert.match(stopped.head, /^HTTP\/1\.1 404/);
  const bad = await upgrade(sock, "/v1/databases/x/connect");
  assert.match(bad.head, /^HTTP\/1\.1 404/);
  assert.equal(JSON.parse(bad.body).error.code, "route_not_found");
  const noUpgrade = await upgrade(
    sock,
    "/v1/databases/15432/connect",
    "Upgrade: websocket\r\nConnection: Upgrade\r\n",
  );
  assert.match(noUpgrade.head, /^HTTP\/1\.1 400/);
  assert.match(JSON.parse(noUpgrade.body).error.message, /needs Upgrade: berth-tcp/);

  const plain = new TaskRunners({ kill: async () => {} });
  t.after(() => plain.stop());
  const dir = (await new RunnerBridges(tempDir(t), plain).openWorkspace("ctr-x", "ws-a")) as string;
  const none = await upgrade(join(dir, "agent.sock"), "/v1/databases/15432/connect");
  assert.match(none.head, /^HTTP\/1\.1 503/);
});
