// A restarted agent (ContainerHost.start over the same roots) and the
// processes its sandbox containers ran (agent/sandboxes/process-records.ts):
// the one that was running answers `error` "the agent restarted while it ran"
// instead of process_not_found, the ended one keeps its exit code, new pids
// go on, and removing the container removes its record.

import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { AGENT_RESTARTED } from "../../agent/sandboxes/process-records.ts";
import { waitFor } from "../../shared/net.ts";
import { needs } from "../helpers/env.ts";
import { HOST_COMMANDS, MiB, hostHarness, withTimeout } from "./harness.ts";

test("a restarted agent: a process that ran is error (the agent restarted), an ended one keeps its code, pids go on", async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const h = await hostHarness(t);
  const c = await h.host.runContainer({
    image: h.imageRef,
    args: ["sh", "-c", "sleep 600"],
    cpu: 0.25,
    memoryBytes: 128 * MiB,
  });
  const ended = await h.host.startProcess(c.id, { args: ["sh", "-c", "echo hi; exit 4"] });
  const running = await h.host.startProcess(c.id, { args: ["sleep", "600"] });
  assert.equal((await withTimeout(h.host.waitProcess(c.id, ended.pid), 30_000, "pid 1's end")).exitCode, 4);
  const records = join(h.dir, "host", "processes");
  // Written a moment after the starts and ends (off their answers' path).
  await waitFor(() => readdirSync(records).length > 0, {
    timeoutMs: 10_000,
    intervalMs: 10,
    what: "the records",
  });
  assert.deepEqual(readdirSync(records), [`${c.id}.processes.json`]);

  const host2 = await h.restart();
  const listed = await host2.listProcesses(c.id);
  assert.deepEqual(
    listed.map((p) => [p.pid, p.status, p.exitCode, p.error]),
    [
      [ended.pid, "exited", 4, undefined],
      [running.pid, "error", 255, AGENT_RESTARTED],
    ],
  );
  assert.equal((await host2.waitProcess(c.id, running.pid)).status, "error");
  const next = await host2.startProcess(c.id, { args: ["sh", "-c", "echo after"] });
  assert.equal(next.pid, 3);
  assert.equal((await withTimeout(host2.waitProcess(c.id, next.pid), 30_000, "pid 3's end")).exitCode, 0);
  assert.equal(
    Buffer.from((await host2.readProcessOutput(c.id, next.pid, "stdout", 0)).data).toString(),
    "after\n",
  );

  await host2.stopContainer(c.id, { graceMs: 0, remove: true });
  assert.equal(existsSync(join(records, `${c.id}.processes.json`)), false);
});
