// `berth doctor`: checks this host for what berth needs (docs/operations.md)
// and prints each finding with its fix; exits 1 when any check fails.

import type { Command } from "commander";
import { BerthError } from "../../shared/errors.ts";
import { type Finding, formatFindings, warn } from "../doctor/finding.ts";
import {
  checkCgroups,
  checkDisk,
  checkGpu,
  checkModules,
  checkNftables,
  checkRuntimes,
} from "../doctor/host-checks.ts";
import { checkPorts } from "../doctor/ports.ts";
import { checkCoordinator, checkNats } from "../doctor/reach.ts";
import { resolveDoctorTargets } from "../doctor/settings.ts";
import { printJson } from "../output.ts";

/** Check groups, for --skip. */
export const DOCTOR_CHECKS = [
  "runtime",
  "cgroups",
  "nftables",
  "modules",
  "gpu",
  "ports",
  "coordinator",
  "nats",
  "disk",
] as const;

interface DoctorOpts {
  coordinator?: string;
  nats?: string;
  agentEnv: string;
  coordinatorConfig: string;
  dataDir: string[];
  maxClockSkew: number;
  skip: string[];
  json?: boolean;
}

export async function runDoctor(o: DoctorOpts): Promise<Finding[]> {
  for (const s of o.skip) {
    if (!(DOCTOR_CHECKS as readonly string[]).includes(s))
      throw new BerthError(
        "invalid_request",
        `--skip ${JSON.stringify(s)}: the checks are ${DOCTOR_CHECKS.join(", ")}`,
      );
  }
  const on = (c: (typeof DOCTOR_CHECKS)[number]) => !o.skip.includes(c);
  const t = resolveDoctorTargets(o);
  const path = process.env.PATH ?? "";
  const findings: Finding[] = [...t.notes];
  if (on("runtime")) findings.push(...(await checkRuntimes(path, t.agentRuntime)));
  if (on("cgroups")) findings.push(checkCgroups());
  if (on("nftables")) findings.push(await checkNftables(path));
  if (on("modules")) findings.push(...checkModules());
  if (on("gpu")) findings.push(await checkGpu(path, t.nvidiaSmi));
  if (on("ports")) findings.push(...checkPorts(t.ports));
  if (on("coordinator")) {
    if (t.coordinator) findings.push(...(await checkCoordinator(t.coordinator.url, o.maxClockSkew * 1000)));
    else
      findings.push(
        warn(
          "coordinator",
          "no coordinator known (no agent.env, identity, coordinator.json or profile)",
          "give --coordinator URL",
        ),
      );
  }
  if (on("nats")) {
    if (t.nats) findings.push(...(await checkNats(t.nats.url)));
    else
      findings.push(
        warn(
          "nats",
          "no NATS URL known (no coordinator.json or agent identity)",
          "give --nats nats://HOST:4222",
        ),
      );
  }
  if (on("disk")) findings.push(...checkDisk(t.dataDirs));
  return findings;
}

export function doctorCommand(program: Command): void {
  program
    .command("doctor")
    .description(
      "check this host for what berth needs (runc, cgroups, nftables, kernel modules, GPU driver, ports, " +
        "coordinator and NATS reachability, clock skew, disk space); prints each problem with its fix, exits 1 on a failure",
    )
    .option(
      "--coordinator <url>",
      "the coordinator to reach (default: agent.env, the agent's identity, coordinator.json, the profile)",
    )
    .option(
      "--nats <url>",
      "NATS URL(s), comma-separated (default: coordinator.json's nats.url, the agent's identity)",
    )
    .option(
      "--agent-env <path>",
      "the agent's environment file from `berth agent join`",
      "/etc/berth/agent.env",
    )
    .option("--coordinator-config <path>", "the coordinator's config file", "/etc/berth/coordinator.json")
    .option(
      "--data-dir <dir>",
      "a data directory whose disk to check (repeatable; default the coordinator's and the agent's)",
      (v: string, acc: string[]) => [...acc, v],
      [] as string[],
    )
    .option(
      "--max-clock-skew <seconds>",
      "clock difference to the coordinator that fails",
      (v) => Number(v),
      10,
    )
    .option(
      "--skip <checks>",
      `leave checks out, comma-separated: ${DOCTOR_CHECKS.join(", ")}`,
      (v: string, acc: string[]) => [...acc, ...v.split(",").filter(Boolean)],
      [] as string[],
    )
    .option("--json", "print the findings as JSON")
    .action(async (o: DoctorOpts) => {
      if (!Number.isFinite(o.maxClockSkew) || o.maxClockSkew < 0)
        throw new BerthError("invalid_request", "--max-clock-skew must be a number of seconds >= 0");
      const findings = await runDoctor(o);
      if (o.json) printJson(findings);
      else process.stdout.write(formatFindings(findings));
      if (findings.some((f) => f.status === "fail")) process.exitCode = 1;
    });
}
