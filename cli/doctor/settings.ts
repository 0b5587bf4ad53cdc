// Where `berth doctor` takes the things it checks from: its flags first, then
// the files an installed host has (/etc/berth/agent.env written by `berth
// agent join`, /etc/berth/coordinator.json, the agent's identity.json), then
// the CLI profile (`berth configure`, `berth up`).

import { readFileSync } from "node:fs";
import { describeError } from "../../shared/errors.ts";
import { readConfig, configPath } from "../config.ts";
import { type Finding, warn } from "./finding.ts";
import type { BerthPort } from "./ports.ts";

export interface DoctorFlags {
  coordinator?: string;
  nats?: string;
  agentEnv: string;
  coordinatorConfig: string;
  dataDir: string[];
}

export interface DoctorTargets {
  coordinator?: { url: string; from: string };
  nats?: { url: string; from: string };
  dataDirs: string[];
  ports: BerthPort[];
  agentRuntime?: string;
  nvidiaSmi?: string;
  /** Files that exist but could not be read (as a non-root user): reported as warnings. */
  notes: Finding[];
}

function readText(path: string, notes: Finding[]): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code !== "ENOENT")
      notes.push(
        warn(
          "settings",
          `cannot read ${path}: ${describeError(e)}`,
          "run berth doctor as root (sudo berth doctor)",
        ),
      );
    return undefined;
  }
}

/** KEY=value lines of a systemd EnvironmentFile. */
function envLines(text: string): Map<string, string> {
  const env = new Map<string, string>();
  for (const line of text.split("\n")) {
    const eq = line.indexOf("=");
    if (line.trim() === "" || line.startsWith("#") || eq < 0) continue;
    env.set(line.slice(0, eq).trim(), line.slice(eq + 1).trim());
  }
  return env;
}

/** The value of `--flag V` (or `--flag=V`) among agent arguments. */
function flagValue(args: string[], flag: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === flag) return args[i + 1];
    if (args[i]!.startsWith(`${flag}=`)) return args[i]!.slice(flag.length + 1);
  }
  return undefined;
}

export function resolveDoctorTargets(f: DoctorFlags, env: NodeJS.ProcessEnv = process.env): DoctorTargets {
  const notes: Finding[] = [];
  const agentEnv = envLines(readText(f.agentEnv, notes) ?? "");
  const agentArgs = (agentEnv.get("BERTH_AGENT_ARGS") ?? "").split(/\s+/).filter(Boolean);
  const agentDataDir = flagValue(agentArgs, "--data-dir") ?? "/var/lib/berth-agent";

  let coordinatorFile: { port?: number; dataDir?: string; publicUrl?: string; nats?: { url?: string } } = {};
  const coordinatorText = readText(f.coordinatorConfig, notes);
  if (coordinatorText !== undefined) {
    try {
      coordinatorFile = JSON.parse(coordinatorText);
    } catch (e) {
      notes.push(
        warn(
          "settings",
          `${f.coordinatorConfig} is not JSON: ${describeError(e)}`,
          "fix the file (docs/install.md, Coordinator)",
        ),
      );
    }
  }
  let identity: { coordinator?: string; nats?: { url?: string } } = {};
  const identityText = readText(`${agentDataDir}/identity.json`, notes);
  if (identityText !== undefined) {
    try {
      identity = JSON.parse(identityText);
    } catch {}
  }
  const profileName = env.BERTH_PROFILE || "default";
  let profileUrl: string | undefined;
  try {
    profileUrl = env.BERTH_URL || readConfig(configPath(env)).profiles[profileName]?.url;
  } catch {}

  const coordinator =
    (f.coordinator && { url: f.coordinator, from: "--coordinator" }) ||
    (agentEnv.get("BERTH_COORDINATOR") && { url: agentEnv.get("BERTH_COORDINATOR")!, from: f.agentEnv }) ||
    (identity.coordinator && { url: identity.coordinator, from: `${agentDataDir}/identity.json` }) ||
    (coordinatorFile.publicUrl && { url: coordinatorFile.publicUrl, from: f.coordinatorConfig }) ||
    (profileUrl && { url: profileUrl, from: `profile ${profileName}` }) ||
    undefined;
  const nats =
    (f.nats && { url: f.nats, from: "--nats" }) ||
    (coordinatorFile.nats?.url && { url: coordinatorFile.nats.url, from: f.coordinatorConfig }) ||
    (identity.nats?.url && { url: identity.nats.url, from: `${agentDataDir}/identity.json` }) ||
    undefined;

  const dataDirs =
    f.dataDir.length > 0 ? f.dataDir : [coordinatorFile.dataDir ?? "/var/lib/berth", agentDataDir];
  const grpcPort = Number(flagValue(agentArgs, "--grpc-port") ?? 8421);
  const ports: BerthPort[] = [
    {
      port: coordinatorFile.port ?? 8420,
      what: "coordinator",
      flag: "`port` in coordinator.json, or --port",
    },
    { port: grpcPort, what: "agent's gRPC listener", flag: "berth agent join --grpc-port N" },
    { port: 4222, what: "NATS server", flag: "`port` in nats.conf, and the NATS URLs" },
  ];
  const agentRuntime = flagValue(agentArgs, "--runtime");
  const nvidiaSmi = flagValue(agentArgs, "--nvidia-smi");
  return {
    ...(coordinator ? { coordinator } : {}),
    ...(nats ? { nats } : {}),
    dataDirs,
    ports,
    ...(agentRuntime ? { agentRuntime } : {}),
    ...(nvidiaSmi ? { nvidiaSmi } : {}),
    notes,
  };
}
