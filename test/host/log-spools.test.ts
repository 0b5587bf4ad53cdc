// streamLogFiles (agent/host/logs.ts) over real spool files: a container
// that writes to stdout and ends while its stderr is being read still has
// its stdout line delivered (a build step's failure names its whole output).

import assert from "node:assert/strict";
import { appendFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { streamLogFiles } from "../../agent/host/logs.ts";
import { tempDir } from "../helpers/env.ts";

test("a container ending between the stdout and the stderr read loses no stdout line", async (t) => {
  const dir = tempDir(t);
  const files = { stdout: join(dir, "stdout.log"), stderr: join(dir, "stderr.log") };
  writeFileSync(files.stdout, "");
  writeFileSync(files.stderr, "oops\n");
  let ended = false;
  const lines: string[] = [];
  for await (const e of streamLogFiles({ containerId: "c1", files, follow: true, stopped: () => ended })) {
    lines.push(`${e.stream}:${e.line}`);
    // Read stdout (empty), now on stderr's line: the container writes to stdout and exits.
    if (e.line === "oops" && !ended) {
      appendFileSync(files.stdout, "about to fail\n");
      ended = true;
    }
  }
  assert.deepEqual(lines.sort(), ["stderr:oops", "stdout:about to fail"]);
});

test("a stopped container's spools are read once, with a last unterminated line", async (t) => {
  const dir = tempDir(t);
  const files = { stdout: join(dir, "stdout.log"), stderr: join(dir, "stderr.log") };
  writeFileSync(files.stdout, "one\ntwo");
  writeFileSync(files.stderr, "");
  const lines: string[] = [];
  for await (const e of streamLogFiles({ containerId: "c1", files, follow: true, stopped: () => true }))
    lines.push(e.line);
  assert.deepEqual(lines, ["one", "two"]);
});
