// A secret reaches a real container's environment: the container manager
// resolves it through a real SecretService and starts the container through a
// real agent container host (runc) over the agent's gRPC unix socket.

import assert from "node:assert/strict";
import { test } from "node:test";
import pino from "pino";
import { ContainerManager } from "../../coordinator/containers/manager.ts";
import { runnerRequest } from "../../coordinator/containers/runner-request.ts";
import { SecretService } from "../../coordinator/secrets/index.ts";
import { Store } from "../../coordinator/records.ts";
import { waitFor } from "../../shared/net.ts";
import { FakeActivity, capacity, oneAgentFleet, stubRecord } from "../containers/fakes.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { realAgent } from "../helpers/real-agent.ts";
import { HOST_COMMANDS } from "../host/harness.ts";
import { randomKey } from "./helpers.ts";

const AGENT = "agent-secrets";

test("a stub's secret is an environment variable inside its container", async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const { h, client } = await realAgent(t);
  const store = await Store.open(`sqlite:${tempDir(t)}/b.db`);
  t.after(() => store.close());
  const secrets = new SecretService({ db: store.db, key: randomKey() });
  const ws = await store.workspaces.create("real");
  const value = "hf_real value with spaces & $dollars\nand a second line";
  await secrets.create(ws.id, "HF_TOKEN", value);

  const fleet = oneAgentFleet(AGENT, capacity(2, 4));
  const activity = new FakeActivity();
  const stub = stubRecord("stub-secret", {
    workspaceId: ws.id,
    config: { runtime: { cpu: 0, gpu: "", memory: 64, image_id: "" } },
    extra: { cpu_millicores: 500, image_ref: h.imageRef, secrets: ["HF_TOKEN"] },
  });
  const mgr = new ContainerManager({
    fleet,
    activity,
    stubs: { get: async (id) => (id === stub.id ? stub : undefined) },
    workspaceLimit: async () => 5,
    code: {
      open: () => {
        throw new Error("no code in this test");
      },
    },
    agents: { client: () => client },
    events: { subscribe: () => () => {} },
    secrets,
    log: pino({ level: "silent" }),
    reconcileIntervalMs: 200,
    // A shell stands in for the runner: it prints the variable, base64 so the newline survives one log line.
    containerRequest: (s, id, gpuType, secretEnv) => {
      const { runner: _runner, code: _code, ...req } = runnerRequest(s, id, gpuType, secretEnv);
      return {
        ...req,
        args: ["sh", "-c", 'printf "token:%s\\n" "$(printf %s "$HF_TOKEN" | base64 -w0)"; sleep 600'],
      };
    },
  });
  mgr.start();
  try {
    activity.set(stub.id, 1, 0, ws.id);
    const line = await waitFor(() => h.logs.find((l) => l.line.startsWith("token:"))?.line, {
      timeoutMs: 120_000,
      intervalMs: 200,
      what: "the container to print its HF_TOKEN",
    });
    assert.equal(Buffer.from(line.slice("token:".length), "base64").toString("utf8"), value);
  } finally {
    await mgr.stop();
  }
  assert.deepEqual(await client.listContainers(), []);
});
