// `berth agent join`: installs this host's agent as the systemd service
// berth-agent (docs/install.md, "Agents"). It writes /etc/berth/agent.env
// (the coordinator, the join token and any extra agent flags; root-only) and
// the unit, made from the packaged systemd/berth-agent.service with its
// ExecStart running this very berth (node and the file it runs, so neither
// PATH nor a /usr/local/bin link matters), then enables and starts it.

import { execFile } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { BerthError, describeError } from "../../shared/errors.ts";

const run = promisify(execFile);

/** The packaged unit (from cli/join/ and from dist/cli/ alike: two levels below the package root). */
export const UNIT_TEMPLATE = fileURLToPath(new URL("../../systemd/berth-agent.service", import.meta.url));
const INSTALL_DOC = fileURLToPath(new URL("../../docs/install.md", import.meta.url));
export const UNIT_NAME = "berth-agent.service";
export const DEFAULT_UNIT_DIR = "/etc/systemd/system";
export const DEFAULT_ENV_FILE = "/etc/berth/agent.env";
/** The template's command; replaced by the one that runs this berth. */
const TEMPLATE_COMMAND = "/usr/local/bin/berth";
const TEMPLATE_DOC = "file:///opt/berth/docs/install.md";

/**
 * What runs this berth: node and the file it runs. From the sources that is
 * cli/bin.js (it loads tsx itself, whatever the working directory); from the
 * bundle, the bundle's entry beside this chunk.
 */
export function berthCommand(): string[] {
  const entry = import.meta.url.endsWith(".ts")
    ? fileURLToPath(new URL("../bin.js", import.meta.url))
    : fileURLToPath(new URL("./berth.js", import.meta.url));
  return [process.execPath, entry];
}

export interface JoinSettings {
  coordinator: string;
  joinToken: string;
  /** More `berth agent` flags, already split into words (BERTH_AGENT_ARGS). */
  agentArgs: string[];
  /** The settings extend an agent.env of an earlier join: the join token may be empty. */
  joinedBefore?: boolean;
}

const invalid = (message: string) => new BerthError("invalid_request", message);

// agent.env is read by systemd (KEY=value lines) and BERTH_AGENT_ARGS is split
// on whitespace: values with blanks, quotes, $ or backslashes would not come
// through as given, so they are refused rather than mangled.
const PLAIN = /^[^\s"'\\$`]+$/;

export function checkJoinSettings(s: JoinSettings): void {
  let url: URL;
  try {
    url = new URL(s.coordinator);
  } catch {
    throw invalid(
      `--coordinator ${JSON.stringify(s.coordinator)} is not a URL (e.g. https://berth.example.com)`,
    );
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw invalid(`--coordinator ${JSON.stringify(s.coordinator)} must be an http:// or https:// URL`);
  }
  if (!PLAIN.test(s.coordinator))
    throw invalid("--coordinator must not hold blanks, quotes, $ or backslashes");
  // Empty only when kept from an agent.env that holds none: a host that joined needs no token.
  if (s.joinToken.trim() === "" && !s.joinedBefore) throw invalid("--join-token is empty");
  if (s.joinToken !== "" && !PLAIN.test(s.joinToken))
    throw invalid("--join-token must not hold blanks, quotes, $ or backslashes");
  for (const a of s.agentArgs) {
    if (!PLAIN.test(a)) {
      throw invalid(
        `the agent flag value ${JSON.stringify(a)} cannot go into ${DEFAULT_ENV_FILE}: ` +
          "no blanks, quotes, $ or backslashes (edit the file by hand for such a value)",
      );
    }
  }
}

/**
 * The settings an earlier `berth agent join` wrote to `envFile`, or undefined when there is none.
 * BERTH_JOIN_TOKEN may be empty or gone: the agent needs it only for its first start.
 */
export function readSavedJoinSettings(envFile: string): Partial<JoinSettings> | undefined {
  let text: string;
  try {
    text = readFileSync(envFile, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    if (code === "EACCES" || code === "EPERM") {
      throw new BerthError(
        "permission_denied",
        `cannot read ${envFile}: permission denied (run as root, e.g. with sudo)`,
      );
    }
    throw new BerthError("internal", `cannot read ${envFile}: ${describeError(e)}`);
  }
  const env = new Map<string, string>();
  for (const line of text.split("\n")) {
    const eq = line.indexOf("=");
    if (line.trim() === "" || line.startsWith("#") || eq < 0) continue;
    env.set(line.slice(0, eq).trim(), line.slice(eq + 1).trim());
  }
  return {
    ...(env.get("BERTH_COORDINATOR") ? { coordinator: env.get("BERTH_COORDINATOR") } : {}),
    ...(env.has("BERTH_JOIN_TOKEN") ? { joinToken: env.get("BERTH_JOIN_TOKEN") } : {}),
    agentArgs: (env.get("BERTH_AGENT_ARGS") ?? "").split(/\s+/).filter((w) => w !== ""),
  };
}

/** The EnvironmentFile of the unit. */
export function renderEnvFile(s: JoinSettings): string {
  return [
    "# Written by `berth agent join`; read by berth-agent.service. Root-only: the join token lets a host join.",
    `BERTH_COORDINATOR=${s.coordinator}`,
    `BERTH_JOIN_TOKEN=${s.joinToken}`,
    ...(s.agentArgs.length > 0 ? [`BERTH_AGENT_ARGS=${s.agentArgs.join(" ")}`] : []),
    "",
  ].join("\n");
}

/** The packaged unit with its ExecStart running `command` and EnvironmentFile at `envFile`. */
export function renderUnit(template: string, command: string[], envFile: string): string {
  for (const part of command) {
    if (!PLAIN.test(part)) throw invalid(`cannot put ${JSON.stringify(part)} into a unit's ExecStart`);
  }
  if (!PLAIN.test(envFile))
    throw invalid(`cannot use ${JSON.stringify(envFile)} as the unit's EnvironmentFile`);
  const lines = template.split("\n");
  const exec = lines.findIndex((l) => l.startsWith(`ExecStart=${TEMPLATE_COMMAND} agent `));
  const env = lines.findIndex((l) => l.startsWith("EnvironmentFile="));
  if (exec < 0 || env < 0)
    throw new BerthError("internal", "the packaged berth-agent.service has no ExecStart or EnvironmentFile");
  lines[exec] = `ExecStart=${command.join(" ")}${lines[exec]!.slice(`ExecStart=${TEMPLATE_COMMAND}`.length)}`;
  lines[env] = `EnvironmentFile=${envFile}`;
  const doc = lines.indexOf(`Documentation=${TEMPLATE_DOC}`);
  if (doc >= 0 && existsSync(INSTALL_DOC)) lines[doc] = `Documentation=file://${INSTALL_DOC}`;
  return [
    `# Installed by \`berth agent join\` (rewritten by the next one). ${UNIT_NAME} of berth's package.`,
    ...lines,
  ].join("\n");
}

/** Writes `path` whole or not at all (a temp file renamed into place) with `mode`. */
function writeAtomic(path: string, text: string, mode: number): void {
  try {
    mkdirSync(dirname(path), { recursive: true, mode: 0o755 });
    const tmp = `${path}.tmp-${process.pid}`;
    writeFileSync(tmp, text, { mode });
    chmodSync(tmp, mode);
    renameSync(tmp, path);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EACCES" || code === "EPERM") {
      throw new BerthError(
        "permission_denied",
        `cannot write ${path}: permission denied (run as root, e.g. with sudo)`,
      );
    }
    throw new BerthError("internal", `cannot write ${path}: ${describeError(e)}`);
  }
}

export interface InstallOptions {
  unitDir: string;
  envFile: string;
  /** Enable and start the unit (systemctl); false only writes the files. */
  start: boolean;
  /** Where systemd marks a booted system (sd_booted(3)); a parameter for tests. */
  systemdRunDir?: string;
  /** Run after the checks, before anything is written: installs what the agent needs (cli/join/packages.ts). */
  prepare?: () => Promise<void>;
  log: (line: string) => void;
}

/** Writes agent.env and the unit, then (start) `systemctl daemon-reload` and `enable --now`. */
export async function installAgentUnit(s: JoinSettings, o: InstallOptions): Promise<void> {
  checkJoinSettings(s);
  // Checked before anything is written, so a host without systemd is left as it was.
  if (o.start && !existsSync(o.systemdRunDir ?? "/run/systemd/system")) {
    throw new BerthError(
      "failed_precondition",
      "this host does not run systemd (no /run/systemd/system): run `berth agent --coordinator URL " +
        "--join-token TOKEN` under your service manager instead, or give --no-start to only write the files",
    );
  }
  const unit = renderUnit(readFileSync(UNIT_TEMPLATE, "utf8"), berthCommand(), o.envFile);
  const unitPath = join(o.unitDir, UNIT_NAME);
  await o.prepare?.();
  writeAtomic(o.envFile, renderEnvFile(s), 0o600);
  try {
    writeAtomic(unitPath, unit, 0o644);
  } catch (e) {
    rmSync(o.envFile, { force: true });
    throw e;
  }
  o.log(`wrote ${o.envFile} (0600) and ${unitPath}`);
  if (!o.start) {
    o.log(`not started (--no-start): systemctl daemon-reload && systemctl enable --now ${UNIT_NAME}`);
    return;
  }
  for (const args of [["daemon-reload"], ["enable", "--now", UNIT_NAME]]) {
    try {
      await run("systemctl", args, { timeout: 120_000 });
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      throw new BerthError(
        "internal",
        `systemctl ${args.join(" ")} failed: ${(err.stderr || err.message).trim()} (the files are in place)`,
      );
    }
  }
  o.log(`started ${UNIT_NAME}: journalctl -u berth-agent -f to watch it join; berth agent list shows it`);
}
