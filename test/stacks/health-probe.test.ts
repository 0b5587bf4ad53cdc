import assert from "node:assert/strict";
import { Agent, createServer, type Server } from "node:http";
import { connect, type AddressInfo } from "node:net";
import { after, test } from "node:test";
import { healthProbe } from "../../coordinator/stacks/health-probe.ts";

// The stack's readiness question to a direct-served container
// (coordinator/stacks/health-probe.ts), asked of a real HTTP server on
// loopback standing where the tunnel leads: 200 is healthy, the runner's 500
// with its load error is a failure naming it, no answer (nothing listens,
// another status) is "not yet".

const servers: Server[] = [];
after(() => Promise.all(servers.map((s) => new Promise((r) => s.close(r)))));

async function serve(status: number, body: string): Promise<number> {
  const paths: string[] = [];
  const s = createServer((req, res) => {
    paths.push(req.url ?? "");
    res.writeHead(req.url === "/.berth/health" ? status : 404, { "content-type": "application/json" });
    res.end(body);
  });
  servers.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return (s.address() as AddressInfo).port;
}

/** A tunnel dialer whose connections all go to this loopback port, as the agent's tunnel goes to the container. */
const tunnelTo = (port: number) => ({
  httpAgent: () => {
    const agent = new Agent();
    agent.createConnection = () => connect(port, "127.0.0.1");
    return agent;
  },
});

const target = { agentId: "agent-1", containerId: "ctr-1" };

test("200 from /.berth/health is healthy", async () => {
  const port = await serve(200, '{"ok": true}');
  assert.deepEqual(await healthProbe(tunnelTo(port))(target), { healthy: true });
});

test("the runner's 500 with its load error is a failure naming the error", async () => {
  const error = {
    type: "RuntimeError",
    message: "import of app:api failed: RuntimeError: boom",
    traceback: "...",
  };
  const port = await serve(500, JSON.stringify({ error }));
  assert.deepEqual(await healthProbe(tunnelTo(port))(target), {
    healthy: false,
    error: "import of app:api failed: RuntimeError: boom",
  });
});

test("no answer yet: nothing listens, or a status that is not the runner's", async () => {
  const closed = await serve(200, "");
  await new Promise((r) => (servers.pop() as Server).close(r));
  assert.equal(await healthProbe(tunnelTo(closed))(target), undefined);
  const other = await serve(502, "bad gateway");
  assert.equal(await healthProbe(tunnelTo(other))(target), undefined);
  const notJson = await serve(500, "<html>oops</html>");
  assert.equal(await healthProbe(tunnelTo(notJson))(target), undefined);
});
