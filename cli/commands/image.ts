// `berth image build|list|rm|pull` (docs/images.md): images the cluster builds.
// build runs the SDK's own build (berth.client.image_build) so the CLI and
// .remote() print the same progress and take the same Image; list, rm and
// pull are the workspace's image routes.

import { spawn } from "node:child_process";
import type { Command } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";
import { pythonCommand } from "../deploy/describe.ts";
import { formatBytes, printJson, printTable } from "../output.ts";

/** An image as `GET /api/v1/image/{ws}` lists it. */
export interface ImageJson {
  image_id: string;
  status: "building" | "ready" | "failed";
  base_image: string;
  base_digest: string;
  digest: string;
  ref: string;
  steps: string[];
  error: string;
  created_at: string;
  updated_at: string;
}

/** `/api/v1/image/{ws}` of the token's own workspace. */
async function imagesPath(api: ApiClient): Promise<string> {
  const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
  return `/api/v1/image/${encodeURIComponent(ws.external_id)}`;
}

// As describe: `python3 -m` would put the working directory first on sys.path.
const RUN_IMAGE_BUILD =
  'import runpy, sys; sys.path.pop(0); runpy.run_module("berth.client.image_build", run_name="__main__", alter_sys=True)';

/** Runs the SDK's build of FILE.py:OBJECT with the terminal as its output; its exit code. */
export async function buildImageTarget(
  target: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<number> {
  const { python, env: childEnv } = pythonCommand(env);
  const child = spawn(python, ["-c", RUN_IMAGE_BUILD, target], { env: childEnv, stdio: "inherit" });
  return new Promise<number>((resolve, reject) => {
    child.once("error", (e: NodeJS.ErrnoException) =>
      reject(
        new BerthError(
          "unavailable",
          e.code === "ENOENT"
            ? `${python} is not installed or not on PATH (set BERTH_PYTHON to the Python 3 to use)`
            : `cannot run ${python}: ${e.message}`,
        ),
      ),
    );
    child.once("close", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}

/** One line of `POST /api/v1/image/{ws}/pull`'s NDJSON progress. */
type PullLine =
  | { event: "pulling"; image: string; agents: { agent_id: string; pool: string }[] }
  | { event: "pulled"; agent_id: string; digest: string; size_bytes: number; seconds: number }
  | { event: "failed"; agent_id: string; error: { code: string; message: string }; seconds: number }
  | { event: "done"; pulled: number; failed: number };

/** The text line of one progress event. */
function pullText(l: PullLine): string {
  switch (l.event) {
    case "pulling":
      return `pulling ${l.image} onto ${l.agents.length} agent${l.agents.length === 1 ? "" : "s"}: ${l.agents.map((a) => `${a.agent_id} (${a.pool})`).join(", ")}`;
    case "pulled":
      return `${l.agent_id}: pulled ${l.digest.slice(0, 19)} (${formatBytes(l.size_bytes)}) in ${l.seconds} s`;
    case "failed":
      return `${l.agent_id}: failed after ${l.seconds} s: ${l.error.code}: ${l.error.message}`;
    case "done":
      return `${l.pulled} pulled, ${l.failed} failed`;
  }
}

/**
 * `berth image pull`: streams each agent's outcome as it ends (one JSON
 * object a line with --json); exit code 1 when any agent failed.
 */
export async function pullImage(
  api: ApiClient,
  image: string,
  o: { pool?: string; json?: boolean },
  out: NodeJS.WritableStream = process.stdout,
): Promise<number> {
  const body = { image, ...(o.pool ? { pool: o.pool } : {}) };
  const res = await api.openStream(`${await imagesPath(api)}/pull`, new AbortController().signal, body);
  let failed = 0;
  let done = false;
  let rest = "";
  const handle = (text: string) => {
    if (!text.trim()) return;
    const l = JSON.parse(text) as PullLine;
    if (l.event === "failed") failed++;
    if (l.event === "done") done = true;
    out.write(o.json ? `${text}\n` : `${pullText(l)}\n`);
  };
  const decoder = new TextDecoder();
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    rest += decoder.decode(chunk, { stream: true });
    const lines = rest.split("\n");
    rest = lines.pop() ?? "";
    for (const line of lines) handle(line);
  }
  handle(rest);
  if (!done) throw new BerthError("unavailable", "the coordinator ended the pull's progress before its end");
  return failed > 0 ? 1 : 0;
}

/** One table row: the step count and the first line of the error. */
function row(i: ImageJson): Record<string, unknown> {
  return {
    image_id: i.image_id,
    status: i.status,
    base_image: i.base_image || "(default)",
    steps: i.steps.length,
    updated_at: i.updated_at,
    error: i.error ? (i.error.split("\n")[0] ?? "").slice(0, 80) : "",
  };
}

export function imageCommands(program: Command): void {
  const image = program
    .command("image")
    .description("images the cluster builds (Image(...) with packages, commands, a Dockerfile)");
  image
    .command("build")
    .description("build an Image on the cluster, streaming each step (cached or built, and its time)")
    .argument("<target>", "FILE.py:OBJECT: an Image, or a function, deployment or pod whose image to build")
    .action(async (target: string) => {
      process.exitCode = await buildImageTarget(target);
    });
  image
    .command("list")
    .description("list the workspace's images with their status (building, ready, failed)")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const r = await api.request<{ images: ImageJson[] }>("GET", await imagesPath(api));
      if (o.json) printJson(r.images);
      else
        printTable(r.images.map(row), ["image_id", "status", "base_image", "steps", "updated_at", "error"]);
    });
  image
    .command("pull")
    .description("pull an image onto every ready agent of a pool now (default: every ready agent)")
    .argument("<image>", "a built image's id (img-...) or an image reference")
    .option("--pool <name>", "only this pool's agents")
    .option("--json", "print each agent's outcome as a JSON line")
    .action(async (ref: string, o: { pool?: string; json?: boolean }) => {
      process.exitCode = await pullImage(ApiClient.fromEnv(), ref, o);
    });
  image
    .command("rm")
    .description("remove an image; refused while an active deployment runs it")
    .argument("<image_id>", "the image's id (img-..., as berth image list shows it)")
    .action(async (id: string) => {
      const api = ApiClient.fromEnv();
      await api.request("DELETE", `${await imagesPath(api)}/${encodeURIComponent(id)}`);
      process.stdout.write(`removed image ${id}\n`);
    });
}
