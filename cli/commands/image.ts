// `berth image build|list|rm` (docs/images.md): images the cluster builds.
// build runs the SDK's own build (berth.client.image_build) so the CLI and
// .remote() print the same progress and take the same Image; list and rm
// are the workspace's image routes.

import { spawn } from "node:child_process";
import type { Command } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";
import { pythonCommand } from "../deploy/describe.ts";
import { printJson, printTable } from "../output.ts";

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
    .command("rm")
    .description("remove an image; refused while an active deployment runs it")
    .argument("<image_id>", "the image's id (img-..., as berth image list shows it)")
    .action(async (id: string) => {
      const api = ApiClient.fromEnv();
      await api.request("DELETE", `${await imagesPath(api)}/${encodeURIComponent(id)}`);
      process.stdout.write(`removed image ${id}\n`);
    });
}
