// `berth doctor` run as operators run it (the CLI in a child process) on a
// host with planted faults: runc and nft missing (a PATH without them), an
// unreachable coordinator, and a coordinator whose clock is hours off (a
// loopback server answering /healthz with such a Date header).

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createServer, type Server } from "node:http";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { promisify } from "node:util";
import { AGENT_MODULES } from "../../cli/doctor/host-checks.ts";
import { UNIT_TEMPLATE } from "../../cli/join/unit.ts";
import { freePort } from "../../shared/net.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestNats } from "../helpers/nats.ts";

const CLI_BIN = new URL("../../cli/bin.js", import.meta.url).pathname;
const exec = promisify(execFile);

/** Runs `berth doctor ARGS` with PATH set to `path` alone; its exit code and output. */
async function doctor(dir: string, path: string, args: string[]): Promise<{ code: number; out: string }> {
  const env = { HOME: dir, BERTH_CONFIG: join(dir, "config.json"), PATH: path };
  const argv = [
    CLI_BIN,
    "doctor",
    "--agent-env",
    join(dir, "none.env"),
    "--coordinator-config",
    join(dir, "none.json"),
  ];
  try {
    const r = await exec(process.execPath, [...argv, "--data-dir", dir, ...args], { env, timeout: 120_000 });
    return { code: 0, out: r.stdout };
  } catch (e) {
    const err = e as { code?: number; stdout?: string; stderr?: string };
    return { code: err.code ?? -1, out: `${err.stdout ?? ""}${err.stderr ?? ""}` };
  }
}

/** A loopback coordinator stand-in: /healthz as the coordinator answers it, its clock `offsetMs` off. */
async function healthServer(t: { after: (fn: () => unknown) => void }, offsetMs: number): Promise<string> {
  const server: Server = createServer((req, res) => {
    res.setHeader("Date", new Date(Date.now() + offsetMs).toUTCString());
    res.setHeader("Content-Type", "application/json");
    res.end(req.url === "/healthz" ? JSON.stringify({ ok: true, version: "test" }) : "{}");
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  t.after(() => new Promise<void>((done) => server.close(() => done())));
  const addr = server.address() as { port: number };
  return `http://127.0.0.1:${addr.port}`;
}

/** The finding line of `check` and the fix line below it. */
function finding(out: string, check: string): { line: string; fix: string } {
  const lines = out.split("\n");
  const i = lines.findIndex((l) => l.slice(6).startsWith(`${check}:`));
  assert.ok(i >= 0, `no finding for ${check} in:\n${out}`);
  return { line: lines[i]!, fix: lines[i + 1]?.startsWith("      fix: ") ? lines[i + 1]! : "" };
}

test("berth doctor names runc and nft missing and an unreachable coordinator, each with its fix", async (t) => {
  const dir = tempDir(t, "berth-doctor-");
  const emptyBin = join(dir, "bin");
  mkdirSync(emptyBin);
  const closed = await freePort();
  const r = await doctor(dir, emptyBin, ["--coordinator", `http://127.0.0.1:${closed}`]);
  assert.equal(r.code, 1, r.out);

  const runc = finding(r.out, "runc");
  assert.match(runc.line, /^FAIL {2}runc: not found on PATH/);
  assert.match(runc.fix, /apt-get install runc/);
  const nft = finding(r.out, "nftables");
  assert.match(nft.line, /^FAIL {2}nftables: nft not found on PATH/);
  assert.match(nft.fix, /apt-get install nftables/);
  const coordinator = finding(r.out, "coordinator");
  assert.match(
    coordinator.line,
    new RegExp(`^FAIL {2}coordinator: cannot reach http://127.0.0.1:${closed}/healthz: .*ECONNREFUSED`),
  );
  assert.match(coordinator.fix, /systemctl start berth-coordinator/);
  assert.match(r.out, /failed/);
});

test("berth doctor measures the clock against the coordinator's Date header: hours off fails, in step passes", async (t) => {
  const dir = tempDir(t, "berth-doctor-");
  const path = process.env.PATH ?? "";
  const ahead = await healthServer(t, 3 * 3600_000);
  const skewed = await doctor(dir, path, [
    "--coordinator",
    ahead,
    "--skip",
    "runtime,nftables,modules,gpu,ports,nats",
  ]);
  assert.equal(skewed.code, 1, skewed.out);
  assert.match(finding(skewed.out, "coordinator").line, /^ok {4}coordinator: .* answers \(berth test\)/);
  const clock = finding(skewed.out, "clock");
  assert.match(clock.line, /^FAIL {2}clock: this host's clock is 3h 0m behind the coordinator's/);
  assert.match(clock.fix, /timedatectl set-ntp true/);

  const inStep = await healthServer(t, 0);
  const fine = await doctor(dir, path, [
    "--coordinator",
    inStep,
    "--skip",
    "runtime,nftables,modules,gpu,ports,nats",
  ]);
  assert.match(finding(fine.out, "clock").line, /^ok {4}clock: within /);
  assert.match(finding(fine.out, "coordinator").line, /^ok {4}coordinator: /);
});

test("berth doctor refuses an unknown --skip name", async (t) => {
  const dir = tempDir(t, "berth-doctor-");
  const r = await doctor(dir, process.env.PATH ?? "", ["--skip", "runc"]);
  assert.equal(r.code, 1);
  assert.match(r.out, /--skip "runc": the checks are runtime, cgroups/);
});

test("berth doctor finds a running NATS with JetStream", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const nats = await startTestNats(t);
  const dir = tempDir(t, "berth-doctor-");
  const r = await doctor(dir, process.env.PATH ?? "", [
    "--nats",
    nats.url,
    "--skip",
    "runtime,nftables,modules,gpu,ports,coordinator",
  ]);
  assert.match(
    finding(r.out, `nats ${nats.url}`).line,
    /^ok {4}nats .*: nats-server .* answers, with JetStream/,
  );
});

test("berth doctor checks the kernel modules berth-agent.service loads", () => {
  const pre = readFileSync(UNIT_TEMPLATE, "utf8")
    .split("\n")
    .find((l) => l.startsWith("ExecStartPre=") && l.includes("modprobe -a"));
  assert.ok(pre);
  assert.deepEqual(
    Object.keys(AGENT_MODULES).sort(),
    pre.split("modprobe -a ")[1]!.trim().split(/\s+/).sort(),
  );
});

test("berth doctor names the program holding a berth port, and passes one berth's NATS holds", async (t) => {
  if (!needs(t, { commands: ["nats-server"] })) return;
  const dir = tempDir(t, "berth-doctor-");
  // This test process (not berth) holds the port the coordinator's config names.
  const squatter = createServer(() => {});
  await new Promise<void>((done) => squatter.listen(0, "127.0.0.1", done));
  t.after(() => new Promise<void>((done) => squatter.close(() => done())));
  const port = (squatter.address() as { port: number }).port;
  const config = join(dir, "coordinator.json");
  writeFileSync(config, JSON.stringify({ port }));
  const nats = await startTestNats(t);
  const natsPort = Number(new URL(nats.url).port);
  const env = { HOME: dir, BERTH_CONFIG: join(dir, "config.json"), PATH: process.env.PATH ?? "" };
  const argv = [CLI_BIN, "doctor", "--agent-env", join(dir, "none.env"), "--coordinator-config", config];
  const skip = ["--skip", "runtime,cgroups,nftables,modules,gpu,coordinator,nats,disk"];
  const r = await exec(process.execPath, [...argv, ...skip], { env }).then(
    () => ({ code: 0, out: "" }),
    (e: { code: number; stdout: string }) => ({ code: e.code, out: e.stdout }),
  );
  assert.equal(r.code, 1, r.out);
  const held = finding(r.out, `port ${port}`);
  assert.match(
    held.line,
    new RegExp(
      `^FAIL {2}port ${port}: held by pid ${process.pid} \\(.*node.*\\), not berth; the coordinator needs it`,
    ),
  );
  assert.match(held.fix, /stop that program, or give berth another port/);
  // NATS on a port doctor checks: berth's own nats-server is fine there.
  const { checkPorts } = await import("../../cli/doctor/ports.ts");
  const [own] = checkPorts([{ port: natsPort, what: "NATS server", flag: "" }]);
  assert.equal(own?.status, "ok", own?.detail);
  assert.match(own!.detail, /^held by berth \(pid \d+: .*nats-server/);
});
