// The agent's MPS control daemon for its shared GPUs: started in a mount
// namespace whose /dev/shm is the MPS directory's shm/, with the pipe and
// log directories and only the shared GPUs visible; reused when one runs.
// A stand-in nvidia-cuda-mps-control (no GPU here) daemonizes as the real
// one does: a background process named nvidia-cuda-mps-control, its pid in
// the pipe directory.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { it } from "node:test";
import { execaRunner } from "../../agent/capacity/commands.ts";
import { ensureMpsDaemon } from "../../agent/capacity/mps-daemon.ts";
import { mpsPaths } from "../../agent/capacity/mps.ts";
import { isBerthError } from "../../shared/errors.ts";
import { needs, tempDir } from "../helpers/env.ts";

const FAKE_CONTROL = `#!/bin/bash
[ "$1" = "-d" ] || exit 2
[ -n "$FAIL" ] && { echo "An instance of this daemon is already running" >&2; exit 1; }
echo "$CUDA_VISIBLE_DEVICES" > "$CUDA_MPS_LOG_DIRECTORY/control.log"
echo probe > /dev/shm/berth-mps-probe-$$
( exec -a nvidia-cuda-mps-control sleep 300 ) </dev/null >/dev/null 2>&1 &
echo $! > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
echo $$ > "$CUDA_MPS_LOG_DIRECTORY/shell.pid"
`;

it("starts the daemon for the shared GPUs with its own /dev/shm, once", async (t) => {
  if (!needs(t, { root: true, commands: ["unshare", "mount"] })) return;
  // Registered before the temp dir's removal, which runs first otherwise and takes the pid file with it.
  let daemonPid: number | undefined;
  t.after(() => {
    if (daemonPid === undefined) return;
    try {
      process.kill(daemonPid, "SIGKILL");
    } catch {
      // already gone
    }
  });
  const root = tempDir(t, "berth-mpsd-");
  const paths = mpsPaths(join(root, "mps"));
  for (const d of Object.values(paths)) mkdirSync(d, { recursive: true });
  const control = join(root, "nvidia-cuda-mps-control");
  writeFileSync(control, FAKE_CONTROL, { mode: 0o755 });
  let starts = 0;
  const runner: typeof execaRunner = (file, args, opts) => {
    starts++;
    return execaRunner(file, args, opts);
  };
  const o = { control, paths, runner };
  const state = await ensureMpsDaemon(o, ["GPU-aaaa", "GPU-bbbb"]);
  assert.ok(state.running);
  daemonPid = state.pid;
  assert.equal(readFileSync(join(paths.log, "control.log"), "utf8").trim(), "GPU-aaaa,GPU-bbbb");
  // What the daemon wrote to /dev/shm is in the MPS directory's shm/, not the host's /dev/shm.
  const shell = readFileSync(join(paths.log, "shell.pid"), "utf8").trim();
  assert.equal(readFileSync(join(paths.shm, `berth-mps-probe-${shell}`), "utf8").trim(), "probe");
  assert.equal(existsSync(`/dev/shm/berth-mps-probe-${shell}`), false);

  // Running already: used as it is.
  const again = await ensureMpsDaemon(o, ["GPU-aaaa", "GPU-bbbb"]);
  assert.deepEqual(again, state);
  assert.equal(starts, 1);
});

it("a daemon that will not start, and no shared GPUs, are said as such", async (t) => {
  if (!needs(t, { root: true, commands: ["unshare", "mount"] })) return;
  const root = tempDir(t, "berth-mpsd-");
  const paths = mpsPaths(join(root, "mps"));
  for (const d of Object.values(paths)) mkdirSync(d, { recursive: true });
  const control = join(root, "nvidia-cuda-mps-control");
  writeFileSync(control, FAKE_CONTROL, { mode: 0o755 });
  const none = await ensureMpsDaemon({ control, paths }, []);
  assert.equal(none.running, false);
  await assert.rejects(
    ensureMpsDaemon({ control, paths, env: { ...process.env, FAIL: "1" } }, ["GPU-aaaa"]),
    (e) =>
      isBerthError(e) &&
      e.code === "unavailable" &&
      /starting the MPS control daemon for the shared GPUs failed: .*already running/.test(e.message),
  );
});
