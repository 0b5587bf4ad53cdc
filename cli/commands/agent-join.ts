// `berth agent join`: sets this host's agent up as the systemd service
// berth-agent (cli/join/unit.ts). The coordinator, the join token and any
// other agent flags are `berth agent`'s own, given on the same line:
//   berth agent join --coordinator URL --join-token TOKEN [--advertise H:P] [--pool gpu] ...

import type { Command, Option } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { DEFAULT_ENV_FILE, DEFAULT_UNIT_DIR, installAgentUnit, type JoinSettings } from "../join/unit.ts";

/** `berth agent`'s options given on the command line, back as flags (for BERTH_AGENT_ARGS). */
export function givenAgentFlags(agent: Command, skip: readonly string[]): string[] {
  const flags: string[] = [];
  for (const opt of agent.options as readonly Option[]) {
    const key = opt.attributeName();
    if (skip.includes(key) || agent.getOptionValueSource(key) !== "cli" || !opt.long) continue;
    const value: unknown = agent.getOptionValue(key);
    if (opt.negate) {
      if (value === false) flags.push(opt.long);
    } else if (value === true) flags.push(opt.long);
    else if (Array.isArray(value)) for (const v of value) flags.push(opt.long, String(v));
    else if (value !== undefined) flags.push(opt.long, String(value));
  }
  return flags;
}

export function agentJoinCommand(agent: Command): void {
  agent
    .command("join")
    .description(
      "install this host's agent as the systemd service berth-agent and start it: writes /etc/berth/agent.env " +
        "(--coordinator, --join-token and the other `berth agent` flags given) and the unit",
    )
    .option("--unit-dir <dir>", "where the unit goes", DEFAULT_UNIT_DIR)
    .option(
      "--env-file <path>",
      "the unit's environment file (root-only: it holds the join token)",
      DEFAULT_ENV_FILE,
    )
    .option("--no-start", "only write the files; do not enable or start the unit")
    .action(async (o: { unitDir: string; envFile: string; start: boolean }) => {
      const a = agent.opts<{ coordinator?: string; joinToken?: string }>();
      if (!a.coordinator || !a.joinToken) {
        throw new BerthError(
          "invalid_request",
          "berth agent join needs --coordinator URL and --join-token TOKEN (from `berth agent join-token create`)",
        );
      }
      const settings: JoinSettings = {
        coordinator: a.coordinator,
        joinToken: a.joinToken,
        // The unit gives --coordinator, --join-token and --data-dir itself.
        agentArgs: givenAgentFlags(agent, ["coordinator", "joinToken"]),
      };
      await installAgentUnit(settings, {
        unitDir: o.unitDir,
        envFile: o.envFile,
        start: o.start,
        log: (line) => process.stdout.write(`${line}\n`),
      });
    });
}
