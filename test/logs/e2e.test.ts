// A function's print, end to end on a `berth up` cluster: the runner
// container writes it, the agent ships it to BERTH_LOGS attributed to its
// task, and GET /api/v1/logs/{ws}?task_id= and `berth logs --task` find it.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { connect } from "nats";
import { closeNats } from "../../shared/nats-server.ts";
import { waitFor } from "../../shared/net.ts";
import { type ContainerLogBatch, streams, subjects } from "../../shared/subjects.ts";
import { startBerthUp, UP_COMMANDS } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const APP = `
import os, sys
from berth import function

@function(cpu=0.5, memory=128)
def chatty(marker):
    print("printed by the function", marker)
    print("to stderr", marker, file=sys.stderr)
    return os.environ["BERTH_TASK_ID"]

if __name__ == "__main__":
    print("task:", chatty.remote(sys.argv[1]))
`;

interface LineJson {
  task_id: string | null;
  stream: string;
  line: string;
  stub_id: string;
  container_id: string;
  workspace_id: string;
}

test("a function's print reaches /api/v1/logs/{ws}?task_id= and berth logs --task", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  writeFileSync(join(up.appDir, "app.py"), APP);
  const marker = `m-${randomBytes(6).toString("hex")}`;
  const out = await up.python(["app.py", marker]);
  const taskId = /^task: (task-\S+)$/m.exec(out)?.[1];
  assert.ok(taskId, out);

  // The agent's side: stored in BERTH_LOGS on the task's subject.
  const cluster = JSON.parse(readFileSync(join(up.dataDir, "cluster.json"), "utf8")) as {
    natsPort: number;
    natsCoordinatorPassword: string;
  };
  const nc = await connect({
    servers: `nats://127.0.0.1:${cluster.natsPort}`,
    user: "coordinator",
    pass: cluster.natsCoordinatorPassword,
  });
  td.defer(() => closeNats(nc));
  const jsm = await nc.jetstreamManager();
  const stored = await waitFor(
    async () => {
      const m = await jsm.streams
        .getMessage(streams.logs.name, { last_by_subj: subjects.workspaceLogs("*", { taskId }) })
        .catch(() => undefined);
      return m ? (JSON.parse(new TextDecoder().decode(m.data)) as ContainerLogBatch) : undefined;
    },
    { timeoutMs: 20_000, what: "the task's lines in BERTH_LOGS" },
  );
  assert.equal(stored.taskId, taskId);

  // The API's side.
  const ws = (await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string };
  const lines = await waitFor(
    async () => {
      const r = await up.api(`/api/v1/logs/${ws.external_id}?task_id=${taskId}`);
      assert.equal(r.status, 200, await r.clone().text());
      const body = (await r.json()) as { lines: LineJson[] };
      return body.lines.length >= 2 ? body.lines : undefined;
    },
    { timeoutMs: 20_000, what: "GET /api/v1/logs?task_id= to find the lines" },
  );
  // stdout and stderr are two spools read apart: their lines keep their order within each stream only.
  const byStream = (ls: LineJson[]) => [...ls].sort((a, b) => a.stream.localeCompare(b.stream));
  assert.deepEqual(
    byStream(lines).map((l) => [l.stream, l.line, l.task_id]),
    [
      ["stderr", `to stderr ${marker}`, taskId],
      ["stdout", `printed by the function ${marker}`, taskId],
    ],
  );
  assert.ok(lines.every((l) => l.workspace_id === ws.external_id));
  assert.match(lines[0]?.stub_id ?? "", /^stub-/);
  assert.match(lines[0]?.container_id ?? "", /^ctr-/);
  // The text filter finds it without the task.
  const byText = (await (
    await up.api(`/api/v1/logs/${ws.external_id}?text=${marker.toUpperCase()}`)
  ).json()) as {
    lines: LineJson[];
  };
  assert.deepEqual(
    byText.lines.map((l) => l.task_id),
    [taskId, taskId],
  );

  const cli = await up.cli(["logs", "--task", taskId, "--json"]);
  assert.equal(cli.code, 0, cli.stderr);
  assert.deepEqual(
    byStream(
      cli.stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as LineJson),
    ).map((l) => l.line),
    [`to stderr ${marker}`, `printed by the function ${marker}`],
  );
});
