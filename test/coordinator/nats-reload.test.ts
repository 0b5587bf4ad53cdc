// users.conf is reloaded on every node of a NATS cluster that runs; a node
// that is down (its pid file stale) is skipped, since it reads the file when
// it starts again, so an agent's join or a coordinator's start does not fail
// while one node of three is away. Only when no node could be reloaded is it
// an error. Real processes stand in for the nodes: a shell that records the
// SIGHUP it gets.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { reloadNatsNodes } from "../../coordinator/fleet/agent-credentials.ts";
import { BerthError } from "../../shared/errors.ts";
import { tempDir } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";

test("a reload reaches every running node, skips a stopped one, and fails only when none runs", async (t) => {
  const dir = tempDir(t, "berth-nats-reload-");
  const hupped = join(dir, "hupped");
  const ready = join(dir, "ready");
  // A "node" that notes SIGHUP and goes on running, as nats-server does.
  const node = spawn(
    "sh",
    ["-c", `trap 'touch ${hupped}' HUP; touch ${ready}; while :; do sleep 0.1; done`],
    {
      stdio: "ignore",
    },
  );
  t.after(() => node.kill("SIGKILL"));
  const running = join(dir, "node-1.pid");
  writeFileSync(running, `${node.pid}\n`);
  // A node that stopped: its pid is of a process that has exited.
  const gone = spawn("true");
  await new Promise((r) => gone.once("exit", r));
  const stopped = join(dir, "node-2.pid");
  writeFileSync(stopped, `${gone.pid}\n`);
  const missing = join(dir, "node-3.pid");

  await waitUntil(() => existsSync(ready), { what: "the node to set its SIGHUP trap" });
  reloadNatsNodes([stopped, running, missing]);
  await waitUntil(() => existsSync(hupped), { what: "the running node to get SIGHUP" });

  assert.throws(
    () => reloadNatsNodes([stopped, missing]),
    (e: unknown) =>
      e instanceof BerthError && e.code === "unavailable" && /cannot reload nats-server/.test(e.message),
  );
  reloadNatsNodes([]); // no pid file: something else reloads (a systemd path unit)
});
