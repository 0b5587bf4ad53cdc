import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { DescribeFailed } from "../../cli/deploy/describe.ts";
import { listDeployables } from "../../cli/stack/members.ts";
import { tempDir } from "../helpers/env.ts";

// What `berth stack deploy FILE.py` takes from the file (cli/stack/members.ts),
// by running the checkout's SDK on real files: its deployable objects by
// name, its berth.Database objects as database members (names starting with
// '_' left out, as describe leaves them out), and describe's own refusals.

test("a file's deployable objects and databases; private names left out", async (t) => {
  const dir = tempDir(t);
  const file = join(dir, "shop.py");
  writeFileSync(
    file,
    `import berth
db = berth.Database("main", memory=512)
cache = berth.Database("cache", engine="redis")
_scratch = berth.Database("scratch")

@berth.endpoint(name="web", secrets=[db.secret_name])
def web():
    return 1

@berth.function()
def job():
    return 2

def plain():
    return 3
`,
  );
  assert.deepEqual(await listDeployables(file), {
    objects: ["job", "web"],
    databases: [
      { kind: "database", name: "cache", engine: "redis" },
      { kind: "database", name: "main", engine: "postgres", memory: 512 },
    ],
  });
});

test("a missing file, or one that does not import, is refused with describe's message", async (t) => {
  const dir = tempDir(t);
  await assert.rejects(listDeployables(join(dir, "nope.py")), (e: unknown) => {
    assert.ok(e instanceof DescribeFailed);
    assert.match((e as Error).message, /no such file/);
    return true;
  });
  const broken = join(dir, "broken.py");
  writeFileSync(broken, "import berth\nraise RuntimeError('cannot import me')\n");
  await assert.rejects(listDeployables(broken), (e: unknown) => {
    assert.ok(e instanceof DescribeFailed);
    assert.match((e as Error).message, /cannot import .*broken\.py: RuntimeError: cannot import me/);
    assert.match((e as DescribeFailed).traceback ?? "", /Traceback/);
    return true;
  });
});
