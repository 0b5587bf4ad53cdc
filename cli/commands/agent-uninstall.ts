// `berth agent uninstall`: the reverse of `berth agent join` and of what the
// agent set up while it ran (agent/uninstall.ts). The data directory and
// network prefix come from `berth agent`'s own flags when given, else from
// the agent.env that join wrote.

import { join } from "node:path";
import type { Command } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { DEFAULT_ENV_FILE, DEFAULT_UNIT_DIR, UNIT_NAME, readSavedJoinSettings } from "../join/unit.ts";
import { loadAgentMain } from "./agent.ts";

/** `--flag V` among saved agent flags. */
function savedFlag(args: string[], flag: string): string | undefined {
  const i = args.indexOf(flag);
  return i >= 0 ? args[i + 1] : undefined;
}

export function agentUninstallCommand(agent: Command): void {
  agent
    .command("uninstall")
    .description(
      `remove the agent from this host: stop and remove ${UNIT_NAME} and agent.env, its containers, the mounts ` +
        "below its data directory, its bridge, veths, namespaces and nft tables, the forwarding sysctls (restored), " +
        "its cgroup parent and its data directory",
    )
    .option("--unit-dir <dir>", "where the unit is", DEFAULT_UNIT_DIR)
    // Not --env-file: Node 20 takes that word as its own option wherever it appears on the command line.
    .option("--agent-env <path>", "the agent.env `berth agent join` wrote", DEFAULT_ENV_FILE)
    .option("--keep-data", "leave the data directory (images, volumes, identity) in place")
    .action(async (o: { unitDir: string; agentEnv: string; keepData?: boolean }) => {
      const saved = readSavedJoinSettings(o.agentEnv)?.agentArgs ?? [];
      const given = (key: string) => agent.getOptionValueSource(key) === "cli";
      const a = agent.opts<{ dataDir: string; networkPrefix?: string }>();
      const dataDir = given("dataDir") ? a.dataDir : (savedFlag(saved, "--data-dir") ?? a.dataDir);
      const networkPrefix = given("networkPrefix") ? a.networkPrefix : savedFlag(saved, "--network-prefix");
      if (process.getuid?.() !== 0)
        throw new BerthError(
          "permission_denied",
          "berth agent uninstall needs root (sudo berth agent uninstall)",
        );
      const { resolveAgentOptions, uninstallAgent } = await loadAgentMain();
      const names = resolveAgentOptions({ dataDir, ...(networkPrefix ? { networkPrefix } : {}) }).network;
      const log = (line: string) => process.stdout.write(`${line}\n`);
      const { problems } = await uninstallAgent({
        dataDir,
        network: names,
        unitPath: join(o.unitDir, UNIT_NAME),
        envFile: o.agentEnv,
        keepData: o.keepData === true,
        log,
      });
      if (problems.length > 0) {
        throw new BerthError(
          "internal",
          `the agent is partly uninstalled; run the command again after fixing: ${problems.join("; ")}`,
        );
      }
      log("the agent is uninstalled");
    });
}
