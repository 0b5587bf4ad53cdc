// The contract's suite against the gRPC client (AgentRpcClient) talking to the
// agent's gRPC server on a unix socket, over a real ContainerHost with runc.
// Needs root and the host's commands; skipped without them, failed under CI=true.

import { needs } from "../helpers/env.ts";
import { realAgent } from "../helpers/real-agent.ts";
import { HOST_COMMANDS } from "../host/harness.ts";
import { containerApiConformance } from "./container-api.ts";

containerApiConformance("ContainerApi conformance: the gRPC client over a real host", async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return undefined;
  const { h, client } = await realAgent(t);
  return { api: client, image: h.imageRef };
});
