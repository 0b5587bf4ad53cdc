// berth up's supervision (cli/up/supervise.ts) with real child processes: a
// child that dies is started again, one that keeps dying is given up on, and
// stop() ends it for good.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { test } from "node:test";
import type { ManagedChild } from "../../cli/up/child.ts";
import { supervise } from "../../cli/up/supervise.ts";
import { waitUntil } from "../helpers/wait.ts";

/** A real `node` child that runs `code`, shaped like berth up's children. */
function nodeChild(name: string, code: string): ManagedChild {
  const child = spawn(process.execPath, ["-e", code], { stdio: "ignore" });
  const exited = new Promise<number | null>((r) => child.once("exit", (c) => r(c)));
  return {
    name,
    process: child,
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}

const alive = (c: ManagedChild) => c.process.exitCode === null && c.process.signalCode === null;

test("a SIGKILLed child is started again, as a new process, and stop() ends it for good", async (t) => {
  const lines: string[] = [];
  const gaveUp: string[] = [];
  const s = supervise("agent", () => nodeChild("agent", "setInterval(() => {}, 1000)"), {
    print: (l) => lines.push(l),
    onGiveUp: (why) => gaveUp.push(why),
    backoffMs: 10,
  });
  t.after(() => s.stop());
  const first = s.current();
  await waitUntil(() => first.process.pid, { what: "the first child's pid" });
  first.process.kill("SIGKILL");
  const second = await waitUntil(
    () => (s.current() !== first && alive(s.current()) ? s.current() : undefined),
    {
      what: "the child to be started again",
      describe: () => lines.join("\n"),
    },
  );
  assert.notEqual(second.process.pid, first.process.pid);
  assert.equal(s.restarts(), 1);
  assert.match(lines.join("\n"), /agent exited unexpectedly \(code null, SIGKILL\); starting it again/);
  await s.stop();
  assert.equal(alive(second), false);
  assert.equal(s.current(), second, "nothing is started after stop()");
  assert.deepEqual(gaveUp, []);
});

test("a child that keeps dying at once is given up on, with why", async () => {
  let starts = 0;
  const gaveUp: string[] = [];
  const s = supervise(
    "coordinator",
    () => {
      starts++;
      return nodeChild("coordinator", "process.exit(3)");
    },
    { print: () => {}, onGiveUp: (why) => gaveUp.push(why), backoffMs: 5, maxRestarts: 3 },
  );
  await waitUntil(() => gaveUp.length > 0, { what: "supervise to give up" });
  assert.equal(starts, 4, "the first start and 3 restarts");
  assert.match(gaveUp[0] ?? "", /^coordinator exited \(code 3\) 4 times within 60 s$/);
  await s.stop();
  assert.equal(starts, 4);
});
