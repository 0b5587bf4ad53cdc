// Files inside a real runc container: through ContainerHost, and through the
// agent's gRPC server and client (unix socket), with one suite for both.

import { join } from "node:path";
import { test } from "node:test";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import { needs } from "../helpers/env.ts";
import { HOST_COMMANDS, hostHarness, MiB } from "../host/harness.ts";
import { FakeAgent } from "../rpc/fake-agent.ts";
import { filesConformance } from "./conformance.ts";
import { SLEEP } from "./harness.ts";

test("container files", { timeout: 300_000 }, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const h = await hostHarness(t);
  const run = () =>
    h.host.runContainer({ image: h.imageRef, cpu: 0.25, memoryBytes: 256 * MiB, args: SLEEP });

  await t.test("through ContainerHost", async (t) => {
    const c = await run();
    await filesConformance(t, h.host, c.id);
    await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
  });

  await t.test("through the gRPC API", async (t) => {
    const socket = join(h.dir, "rpc", "agent.sock");
    const server = await startAgentRpcServer({
      impl: new FakeAgent(),
      containers: h.host,
      unixSocket: socket,
    });
    t.after(() => server.close());
    const client = new AgentRpcClient({ address: `unix://${socket}` });
    t.after(() => client.close());
    const c = await run();
    await filesConformance(t, client, c.id);
    await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
  });
});
