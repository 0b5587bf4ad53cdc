// berth serve's watcher (cli/deploy/watch.ts): what a running program writes
// beside its code — .berthignore's files, logs, common output folders, and
// the file the session's own output is redirected to — never reloads it.

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { spawnSync } from "node:child_process";
import { DEFAULT_IGNORES, watchTree } from "../../cli/deploy/watch.ts";
import { DEFAULT_SDK_DIR } from "../../cli/deploy/describe.ts";

function tree(t: { after: (fn: () => void) => void }): string {
  const dir = mkdtempSync(join(tmpdir(), "berth-watch-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, "app.py"), "x = 1\n");
  writeFileSync(join(dir, ".berthignore"), "results/\n*.bin\n!logs/\n");
  return dir;
}

/** The first change the watcher reports (its relative paths). */
function nextChange(root: string, ownFiles: { dev: number; ino: number }[]) {
  let close = () => {};
  const changed = new Promise<string[]>((resolve) => {
    const w = watchTree(root, resolve, { debounceMs: 200, ownFiles });
    close = () => w.close();
  });
  return { changed, close: () => close() };
}

test("output files, logs, .berthignore's files and the session's own log do not reload; an edit does", async (t) => {
  const root = tree(t);
  const ownLog = join(root, "serve.out");
  writeFileSync(ownLog, "");
  const own = statSync(ownLog);
  const w = nextChange(root, [{ dev: own.dev, ino: own.ino }]);
  t.after(w.close);
  // What a program and its session write while running...
  for (const d of ["outputs", "results", "wandb"]) mkdirSync(join(root, d));
  writeFileSync(join(root, "outputs", "image.png"), "png");
  writeFileSync(join(root, "results", "r.json"), "{}");
  writeFileSync(join(root, "wandb", "run.txt"), "run");
  writeFileSync(join(root, "train.log"), "step 1\n");
  writeFileSync(join(root, "weights.bin"), "w");
  writeFileSync(ownLog, "berth: reloaded\n");
  // ...then a real edit: the one change reported is the edit alone.
  writeFileSync(join(root, "app.py"), "x = 2\n");
  assert.deepEqual(await w.changed, ["app.py"]);
});

test("a watch-only default can be taken back in .berthignore (!logs/)", async (t) => {
  const root = tree(t);
  const w = nextChange(root, []);
  t.after(w.close);
  mkdirSync(join(root, "logs"));
  writeFileSync(join(root, "logs", "config.py"), "level = 1\n");
  const paths = await w.changed;
  assert.ok(
    paths.some((p) => p.startsWith("logs")),
    paths.join(","),
  );
});

test("the watcher leaves out what code sync leaves out: its defaults are the SDK's", () => {
  const r = spawnSync(
    "python3",
    [
      "-c",
      "import json; from berth.client.ignore import DEFAULT_IGNORES; print(json.dumps(list(DEFAULT_IGNORES)))",
    ],
    { encoding: "utf8", env: { ...process.env, PYTHONPATH: DEFAULT_SDK_DIR } },
  );
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(DEFAULT_IGNORES, JSON.parse(r.stdout));
  for (const dir of ["node_modules/", ".git/", "dist/", "build/", ".venv/"])
    assert.ok(DEFAULT_IGNORES.includes(dir), dir);
});
