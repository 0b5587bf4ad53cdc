// The task status API's python_version comes from the container itself
// (coordinator/containers/python-version.ts), over the shared fake agent.

import assert from "node:assert/strict";
import { test } from "node:test";
import { ContainerPythonVersions } from "../../coordinator/containers/python-version.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { waitUntil } from "../helpers/wait.ts";

async function withContainer() {
  const agent = new FakeContainerApi({ agentId: "agent-a" });
  const c = await agent.runContainer({ id: "ctr-1", args: ["sleep"], cpu: 1, memoryBytes: 1 << 27 });
  return { agent, id: c.id, versions: new ContainerPythonVersions({ client: () => agent }) };
}

test("asks the container's python3 once and keeps its answer", async () => {
  const { agent, id, versions } = await withContainer();
  const asked = versions.of("agent-a", id);
  const exec = await waitUntil(() => agent.execs[0], { what: "the exec in the container" });
  assert.deepEqual(exec.req.args.slice(0, 2), ["python3", "-c"]);
  exec.write("stdout", "3.11\n");
  exec.finish(0);
  assert.equal(await asked, "3.11");
  assert.equal(await versions.of("agent-a", id), "3.11");
  assert.equal(agent.execs.length, 1, "asked once");
});

test("no python3 (or a container that is gone): no answer, and it is asked again next time", async () => {
  const { agent, id, versions } = await withContainer();
  const asked = versions.of("agent-a", id);
  const exec = await waitUntil(() => agent.execs[0], { what: "the exec in the container" });
  exec.write("stderr", "exec: python3: not found\n");
  exec.finish(127);
  assert.equal(await asked, undefined);
  assert.equal(await versions.of("agent-a", "ctr-gone"), undefined);
  const again = versions.of("agent-a", id);
  const second = await waitUntil(() => agent.execs[1], { what: "a second exec" });
  second.write("stdout", "3.12\n");
  second.finish(0);
  assert.equal(await again, "3.12");
});
