// `berth agent join`: sets this host's agent up as the systemd service
// berth-agent (cli/join/unit.ts). The coordinator, the join token and any
// other agent flags are `berth agent`'s own, given on the same line:
//   berth agent join --coordinator URL --join-token TOKEN [--advertise H:P] [--pool gpu] ...
// Run again (an upgrade: `berth agent join --no-start`), it keeps what the
// agent.env of the earlier join holds unless the line gives it anew.

import { type Command, Option } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { ensureAgentPackages } from "../join/packages.ts";
import {
  DEFAULT_ENV_FILE,
  DEFAULT_UNIT_DIR,
  installAgentUnit,
  type JoinSettings,
  readSavedJoinSettings,
} from "../join/unit.ts";

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

/** Flag words grouped one option each ([--pool, gpu], [--no-containers]), keyed by the option's attribute. */
function groupFlags(
  agent: Command,
  words: string[],
  from: string,
): { key: string; index: number; words: string[] }[] {
  const options = agent.options as readonly Option[];
  const groups: { key: string; index: number; words: string[] }[] = [];
  for (let i = 0; i < words.length; i++) {
    const index = options.findIndex((o) => o.long === words[i]);
    const opt = options[index];
    if (!opt) {
      throw new BerthError(
        "invalid_request",
        `${from} holds ${JSON.stringify(words[i])}, which is not a flag of this berth's \`berth agent\`: ` +
          "edit the file, or give --replace to write it from this command line alone",
      );
    }
    const takesValue = opt.required || opt.optional;
    groups.push({
      key: opt.attributeName(),
      index,
      words: takesValue ? [words[i]!, words[++i] ?? ""] : [words[i]!],
    });
  }
  return groups;
}

/**
 * The agent flags to write: the saved ones, with every option the command line gives replaced by
 * its new value(s), in `berth agent`'s option order.
 */
export function mergeAgentFlags(agent: Command, saved: string[], given: string[], from: string): string[] {
  const now = groupFlags(agent, given, "the command line");
  const replaced = new Set(now.map((g) => g.key));
  const kept = groupFlags(agent, saved, from).filter((g) => !replaced.has(g.key));
  return [...kept, ...now].sort((a, b) => a.index - b.index).flatMap((g) => g.words);
}

export function agentJoinCommand(agent: Command): void {
  agent
    .command("join")
    .description(
      "install this host's agent as the systemd service berth-agent and start it: writes /etc/berth/agent.env " +
        "(--coordinator, --join-token and the other `berth agent` flags given) and the unit",
    )
    .option("--unit-dir <dir>", "where the unit goes", DEFAULT_UNIT_DIR)
    // Not --env-file: Node 20 takes that word as its own option wherever it appears on the command line
    // (it exits "not found" before berth runs when the file does not exist yet, as at a first join).
    .option(
      "--agent-env <path>",
      "the unit's environment file (root-only: it holds the join token)",
      DEFAULT_ENV_FILE,
    )
    .addOption(new Option("--env-file <path>", "the former name of --agent-env").hideHelp())
    .option("--no-start", "only write the files; do not enable or start the unit")
    .option(
      "--no-install-deps",
      "do not install the Debian packages the agent needs (runc, nftables, skopeo, ...) when they are missing",
    )
    .option(
      "--replace",
      "write agent.env from this command line alone (by default a second join keeps what the file holds and the line does not give)",
    )
    .action(
      async (o: {
        unitDir: string;
        agentEnv: string;
        envFile?: string;
        start: boolean;
        installDeps: boolean;
        replace?: boolean;
      }) => {
        if (o.envFile !== undefined) {
          // Node reads the word too and stops when the file does not exist, so the old spelling cannot be kept.
          throw new BerthError(
            "invalid_request",
            "--env-file is now --agent-env (Node takes --env-file as its own option)",
          );
        }
        const envFile = o.agentEnv;
        const a = agent.opts<{ coordinator?: string; joinToken?: string }>();
        const saved = o.replace ? undefined : readSavedJoinSettings(envFile);
        const coordinator = a.coordinator ?? saved?.coordinator;
        const joinToken = a.joinToken ?? saved?.joinToken;
        if (!coordinator || (joinToken === undefined && !saved)) {
          throw new BerthError(
            "invalid_request",
            "berth agent join needs --coordinator URL and --join-token TOKEN (from `berth agent join-token create`)",
          );
        }
        // The unit gives --coordinator, --join-token and --data-dir itself.
        const given = givenAgentFlags(agent, ["coordinator", "joinToken"]);
        const settings: JoinSettings = {
          coordinator,
          joinToken: joinToken ?? "",
          agentArgs: saved ? mergeAgentFlags(agent, saved.agentArgs ?? [], given, envFile) : given,
          ...(saved ? { joinedBefore: true } : {}),
        };
        const log = (line: string) => process.stdout.write(`${line}\n`);
        if (saved) {
          const kept = [
            ...(a.coordinator === undefined ? ["the coordinator"] : []),
            ...(a.joinToken === undefined
              ? [joinToken ? "the join token" : "no join token (this host joined)"]
              : []),
            ...(settings.agentArgs.length > 0 ? [`agent flags ${settings.agentArgs.join(" ")}`] : []),
          ];
          log(
            `kept from ${envFile} (give a flag to change it, --replace to start afresh): ${kept.join(", ") || "nothing"}`,
          );
        }
        await installAgentUnit(settings, {
          unitDir: o.unitDir,
          envFile,
          start: o.start,
          log,
          ...(o.installDeps ? { prepare: () => ensureAgentPackages(log) } : {}),
        });
      },
    );
}
