// The contract's suite against the agent's own implementation: ContainerHost
// with runc, the test image from a local registry (test/host/harness.ts).
// Needs root and the host's commands; skipped without them, failed under CI=true.

import { needs } from "../helpers/env.ts";
import { HOST_COMMANDS, hostHarness } from "../host/harness.ts";
import { containerApiConformance } from "./container-api.ts";

containerApiConformance("ContainerApi conformance: the real host (runc)", async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return undefined;
  const h = await hostHarness(t);
  return { api: h.host, image: h.imageRef };
});
