import { basename } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { BerthError } from "../../shared/errors.ts";
import type { Command } from "commander";
import { ApiClient } from "../api-client.ts";
import { DescribeFailed } from "../deploy/describe.ts";
import { printJson, printTable } from "../output.ts";
import { stackMembersOf } from "../stack/members.ts";
import { reportDescribeFailure } from "./deploy.ts";

// `berth stack deploy app.py` and `berth stack list` (docs/stacks.md).

interface MemberJson {
  name: string;
  kind: string;
  action: string;
  id: string | null;
  version: number | null;
  state: string;
  reason?: string;
}

interface VersionJson {
  version: number;
  status: string;
  members: MemberJson[];
  failure: { member: string; reason: string } | null;
}

export interface StackJson {
  id: string;
  name: string;
  current_version: number;
  applying_version: number | null;
  current: VersionJson | null;
  latest: VersionJson | null;
}

const DEFAULT_READY_TIMEOUT_S = 300;
const POLL_MS = 2000;

async function stackBase(api: ApiClient): Promise<string> {
  const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
  return `/api/v1/stack/${encodeURIComponent(ws.external_id)}`;
}

export function stackCommands(program: Command): void {
  const stack = program
    .command("stack")
    .description("stacks: deployments applied, updated and rolled back as one");
  stack
    .command("deploy")
    .description(
      "deploy every deployable object of FILE.py as one stack: all become ready, or all go back to the previous version",
    )
    .argument(
      "<file>",
      "FILE.py; its @endpoint, @asgi, @realtime, @task_queue, @schedule, @function and berth.Pod objects",
    )
    .option("--name <name>", "stack name (default: the file's name without .py)")
    .option(
      "--ready-timeout <seconds>",
      "how long the members may take to be ready",
      String(DEFAULT_READY_TIMEOUT_S),
    )
    .option("--json", "print the stack record as JSON")
    .action(async (file: string, o: { name?: string; readyTimeout: string; json?: boolean }) => {
      const readyTimeout = Number(o.readyTimeout);
      if (!Number.isInteger(readyTimeout) || readyTimeout < 1) {
        process.stderr.write(
          `berth: --ready-timeout must be a whole number of seconds, not ${o.readyTimeout}\n`,
        );
        process.exitCode = 2;
        return;
      }
      const api = ApiClient.fromEnv();
      let members: Awaited<ReturnType<typeof stackMembersOf>>["members"];
      try {
        ({ members } = await stackMembersOf(api, file));
      } catch (e) {
        if (!(e instanceof DescribeFailed)) throw e;
        reportDescribeFailure(e);
        process.exitCode = 2;
        return;
      }
      const name = o.name ?? basename(file).replace(/\.py$/, "");
      const base = await stackBase(api);
      const { stacks } = await api.request<{ stacks: StackJson[] }>("GET", base);
      const existing = stacks.find((s) => s.name === name);
      const body = { members, ready_timeout_s: readyTimeout };
      process.stderr.write(
        `${existing ? "updating" : "creating"} stack ${name}: ${members.map((m) => m.name).join(", ")} (waiting until ready)\n`,
      );
      // Answered at once (202); the attempt is followed here, so no request stays open for minutes.
      const started = existing
        ? await api.request<StackJson>("PUT", `${base}/${encodeURIComponent(existing.id)}?wait=false`, body)
        : await api.request<StackJson>("POST", `${base}?wait=false`, { name, ...body });
      const s = await followAttempt(api, base, started);
      if (o.json) printJson(s);
      const latest = s.latest;
      if (latest?.status !== "ready") {
        const f = latest?.failure;
        process.stderr.write(
          `berth: stack ${s.name} version ${latest?.version ?? "?"} was rolled back${f ? `: ${f.member} failed: ${f.reason}` : ""}\n`,
        );
        if (!o.json) printMembers(latest?.members ?? []);
        process.exitCode = 1;
        return;
      }
      if (o.json) return;
      process.stdout.write(`stack ${s.name} version ${latest.version} is ready (${s.id})\n`);
      printMembers(latest.members);
    });
  stack
    .command("list")
    .description("list the workspace's stacks with their live and latest versions")
    .option("--json", "print JSON")
    .action(async (o: { json?: boolean }) => {
      const api = ApiClient.fromEnv();
      const { stacks } = await api.request<{ stacks: StackJson[] }>("GET", await stackBase(api));
      if (o.json) return printJson(stacks);
      printTable(
        stacks.map((s) => ({
          id: s.id,
          name: s.name,
          live: s.current_version || null,
          latest: s.latest ? `v${s.latest.version} ${s.latest.status}` : null,
          members: (s.current ?? s.latest)?.members.map((m) => m.name).join(",") || null,
          failure: s.latest?.failure ? `${s.latest.failure.member}: ${s.latest.failure.reason}` : null,
        })),
        ["id", "name", "live", "latest", "members", "failure"],
      );
    });
}

/** Polls the stack until the attempt `started` made has ended; prints each member's state as it changes. */
async function followAttempt(api: ApiClient, base: string, started: StackJson): Promise<StackJson> {
  const version = started.latest?.version;
  let s = started;
  let said = "";
  for (;;) {
    const latest = s.latest;
    if (latest && latest.version === version && latest.status !== "applying") return s;
    const states = (latest?.members ?? []).map((m) => `${m.name} ${m.state}`).join(", ");
    if (states && states !== said) process.stderr.write(`  ${states}\n`);
    said = states;
    await sleep(POLL_MS);
    const { stacks } = await api.request<{ stacks: StackJson[] }>("GET", base);
    const now = stacks.find((x) => x.id === started.id);
    if (!now) throw new BerthError("not_found", `stack ${started.name} is gone`);
    s = now;
  }
}

function printMembers(members: MemberJson[]): void {
  printTable(
    members.map((m) => ({
      member: m.name,
      kind: m.kind,
      action: m.action,
      version: m.version,
      state: m.state,
      reason: m.reason ?? null,
    })),
    ["member", "kind", "action", "version", "state", "reason"],
  );
}
