import type { Command } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";
import { DescribeFailed } from "../deploy/describe.ts";
import { printLogLine } from "../deploy/logs.ts";
import { serveSession } from "../deploy/serve-session.ts";
import { reportDescribeFailure } from "./deploy.ts";

function idleSeconds(v: string): number {
  const n = Number(v);
  if (!/^\d+(\.\d+)?$/.test(v.trim()) || !(n > 0)) {
    throw new BerthError(
      "invalid_request",
      `--idle-timeout must be a number of seconds > 0, got ${JSON.stringify(v)}`,
    );
  }
  return n;
}

export function serveCommand(program: Command): void {
  program
    .command("serve")
    .description(
      "serve FILE.py:OBJECT for development: syncs your files on every edit, forwards the container logs, " +
        "ends (and deletes the deployment) on Ctrl-C or when idle",
    )
    .argument("<target>", "FILE.py:OBJECT, e.g. app.py:predict")
    .option("--name <name>", "deployment name (default: the decorator's name, else the function's)")
    .option("--idle-timeout <seconds>", "end after this long without a request or an edit", "600")
    .action(async (target: string, o: { name?: string; idleTimeout: string }) => {
      const idleTimeoutS = idleSeconds(o.idleTimeout);
      const stop = new AbortController();
      let signals = 0;
      const onSignal = () => {
        // A second Ctrl-C does not wait for the cleanup.
        if (++signals > 1) process.exit(130);
        process.stderr.write("stopping...\n");
        stop.abort();
      };
      process.on("SIGINT", onSignal);
      process.on("SIGTERM", onSignal);
      try {
        process.exitCode = await serveSession({
          api: ApiClient.fromEnv(),
          target,
          ...(o.name !== undefined ? { name: o.name } : {}),
          idleTimeoutS,
          stop: stop.signal,
          say: (l) => process.stdout.write(`${l}\n`),
          warn: (l) => process.stderr.write(`berth: ${l}\n`),
          printLog: (l) => printLogLine(l),
        });
      } catch (e) {
        if (!(e instanceof DescribeFailed)) throw e;
        reportDescribeFailure(e);
        process.exitCode = 2;
      } finally {
        process.off("SIGINT", onSignal);
        process.off("SIGTERM", onSignal);
      }
    });
}
