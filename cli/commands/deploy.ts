import type { Command } from "commander";
import { ApiClient } from "../api-client.ts";
import { DescribeFailed } from "../deploy/describe.ts";
import { waitForPodStart } from "../deploy/pod-wait.ts";
import { codeLine, invocationLines, publish } from "../deploy/publish.ts";
import { DeploymentRoutes } from "../deploy/rest.ts";

/** Prints why describe refused the target (its traceback too) and sets exit code 2. */
export function reportDescribeFailure(e: DescribeFailed, out: NodeJS.WritableStream = process.stderr): void {
  out.write(`berth: ${e.message}\n`);
  if (e.traceback) out.write(e.traceback.endsWith("\n") ? e.traceback : `${e.traceback}\n`);
}

export function deployCommand(program: Command): void {
  program
    .command("deploy")
    .description(
      "deploy an @endpoint, @asgi, @realtime, @task_queue, @schedule, @function, a berth.Pod or a berth.Bot; prints its URL",
    )
    .argument("<target>", "FILE.py:OBJECT, e.g. app.py:predict")
    .option("--name <name>", "deployment name (default: the decorator's name, else the function's)")
    .action(async (target: string, o: { name?: string }) => {
      try {
        const api = ApiClient.fromEnv();
        const p = await publish(api, target, o.name !== undefined ? { name: o.name } : {});
        const d = p.deployment;
        process.stderr.write(`${codeLine(p)}\n`);
        process.stdout.write(`deployed ${d.name} version ${d.version}\n`);
        for (const line of invocationLines(d, p.described)) process.stdout.write(`${line}\n`);
        for (const w of p.warnings) process.stderr.write(`berth: warning: ${w}\n`);
        // A pod has no task to fail: watch its first container and say why it does not start.
        if (p.described.type === "pod" && p.warnings.length === 0) {
          const started = await waitForPodStart(new DeploymentRoutes(api), d.id);
          if (started.ok === true) process.stdout.write("its container is running\n");
          else if (started.ok === "pending") process.stdout.write("its container is still starting\n");
          else {
            process.stderr.write(`berth: the pod's container does not start: ${started.error}\n`);
            process.exitCode = 1;
          }
        }
      } catch (e) {
        if (!(e instanceof DescribeFailed)) throw e;
        reportDescribeFailure(e);
        process.exitCode = 2;
      }
    });
}
