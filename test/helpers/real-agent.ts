// A real container host (runc) reached the way the coordinator reaches an
// agent: over the agent's gRPC server on a unix socket. The server, the client
// and the host are closed in t.after, pass or fail.

import { join } from "node:path";
import type { TestContext } from "node:test";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import type { ContainerApi } from "../../api/index.ts";
import { startAgentRpcServer } from "../../agent/rpc/server.ts";
import { type HostHarness, hostHarness } from "../host/harness.ts";
import { FakeAgent } from "../rpc/fake-agent.ts";
import { tempDir } from "./env.ts";

/** Serves `containers` over the agent's gRPC API on a fresh unix socket: a client of it. */
export async function agentRpcClient(
  t: { after: (fn: () => unknown) => void },
  containers: ContainerApi,
): Promise<AgentRpcClient> {
  const sock = join(tempDir(t), "agent.sock");
  const server = await startAgentRpcServer({ impl: new FakeAgent(), containers, unixSocket: sock });
  t.after(() => server.close());
  const client = new AgentRpcClient({ address: `unix://${sock}` });
  t.after(() => client.close());
  return client;
}

export interface RealAgent {
  /** The container host behind the socket, with its image, events and logs. */
  h: HostHarness;
  client: AgentRpcClient;
}

/** A fresh real container host and a gRPC client of it. Call after needs(t, { root: true, commands: HOST_COMMANDS }). */
export async function realAgent(t: TestContext): Promise<RealAgent> {
  const h = await hostHarness(t);
  return { h, client: await agentRpcClient(t, h.host) };
}
