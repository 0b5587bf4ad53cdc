// `berth stack deploy app.py` (docs/stacks.md): the stack's members are every
// deployable object of the file (@endpoint, @asgi, @realtime, @task_queue,
// @schedule, @function, berth.Pod at module level, names not starting with
// '_'), each described by berth.client.describe with its code archive, as
// `berth deploy FILE.py:OBJECT` describes it, and the archives uploaded; and
// every module-level berth.Database, a database member.

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { BerthError } from "../../shared/errors.ts";
import type { ApiClient } from "../api-client.ts";
import { DescribeFailed, type Described, describeTarget, pythonCommand } from "../deploy/describe.ts";
import { uploadArchive } from "../deploy/publish.ts";

/** A database member as berth.Database.stack_member() writes it. */
export interface DatabaseMember {
  kind: "database";
  name: string;
  engine: string;
  cpu?: number;
  memory?: number;
}

/** A stack member as POST/PUT /api/v1/stack take it. */
export interface DeploymentMember {
  kind: "deployment";
  name: string;
  type: string;
  config: Record<string, unknown>;
  extra: Record<string, unknown>;
}

// The file's deployable objects, found the way describe finds them (its own
// import and its own test of what is deployable), so both agree on the list.
const LIST_DEPLOYABLES = `
import json, sys
sys.path.pop(0)
from berth.client import describe as d
from berth.api.database import Database
try:
    m = d._import_file(sys.argv[1])
    dbs = sorted((v for k, v in vars(m).items() if isinstance(v, Database) and not k.startswith("_")), key=lambda v: v.name)
    print(json.dumps({"ok": True, "objects": d._deployables(m), "databases": [v.stack_member() for v in dbs]}))
except d.DescribeError as e:
    print(json.dumps({"ok": False, "error": str(e), "traceback": e.traceback}))
    sys.exit(2)
`;

/** The names of the file's deployable objects, and its databases as members. */
export async function listDeployables(
  file: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ objects: string[]; databases: DatabaseMember[] }> {
  const path = resolve(file);
  if (!existsSync(path)) throw new DescribeFailed(`no such file: ${file}`);
  const { python, env: pyEnv } = pythonCommand(env);
  const child = spawn(python, ["-c", LIST_DEPLOYABLES, path], {
    env: pyEnv,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.on("data", (d: Buffer) => process.stderr.write(d));
  const exit = await new Promise<number | null>((done, fail) => {
    child.once("error", (e) => fail(new BerthError("unavailable", `cannot run ${python}: ${e.message}`)));
    child.once("close", done);
  });
  const line = stdout.trim().split("\n").pop() ?? "";
  let answer:
    | { ok?: boolean; objects?: string[]; databases?: DatabaseMember[]; error?: string; traceback?: string }
    | undefined;
  try {
    answer = JSON.parse(line) as typeof answer;
  } catch {
    answer = undefined;
  }
  if (!answer || typeof answer.ok !== "boolean")
    throw new BerthError(
      "internal",
      `listing the objects of ${file} (${python}) exited with ${exit} without its answer`,
    );
  if (!answer.ok) throw new DescribeFailed(answer.error ?? "cannot read the file", answer.traceback);
  return { objects: answer.objects ?? [], databases: answer.databases ?? [] };
}

/** Describes every deployable object of `file` and uploads the code archives the coordinator lacks. */
export async function stackMembersOf(
  api: ApiClient,
  file: string,
  o: { env?: NodeJS.ProcessEnv } = {},
): Promise<{ members: (DeploymentMember | DatabaseMember)[]; described: Described[] }> {
  const { objects: names, databases } = await listDeployables(file, o.env);
  if (names.length === 0 && databases.length === 0)
    throw new DescribeFailed(
      `${file} has no deployable objects: decorate functions with @endpoint, @asgi, @realtime, @task_queue, @schedule or @function, or make a berth.Pod or berth.Database`,
    );
  const dir = mkdtempSync(join(tmpdir(), "berth-stack-"));
  try {
    const described: Described[] = [];
    for (const [i, name] of names.entries()) {
      const archive = join(dir, `code-${i}.tar.gz`);
      const d = await describeTarget(`${file}:${name}`, { archive, ...(o.env ? { env: o.env } : {}) });
      await uploadArchive(api, d.extra.code_sha256, archive);
      described.push(d);
    }
    const members = described.map((d) => ({
      kind: "deployment" as const,
      name: d.name,
      type: d.type,
      config: d.config,
      extra: d.extra,
    }));
    return { members: [...databases, ...members], described };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
