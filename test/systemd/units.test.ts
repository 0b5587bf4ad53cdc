import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { needs, unavailable } from "../helpers/env.ts";

const UNIT_DIR = fileURLToPath(new URL("../../systemd/", import.meta.url));
const UNITS = ["berth-nats.service", "berth-coordinator.service", "berth-agent.service"];

type Unit = Map<string, Map<string, string[]>>;

/** systemd's INI dialect: sections, repeatable keys, # and ; comments, \ continuations. */
function parseUnit(text: string, name: string): Unit {
  const unit: Unit = new Map();
  let section: Map<string, string[]> | undefined;
  const lines = text.replace(/\\\n/g, " ").split("\n");
  lines.forEach((raw, i) => {
    const line = raw.trim();
    if (line === "" || line.startsWith("#") || line.startsWith(";")) return;
    const header = /^\[([A-Za-z]+)\]$/.exec(line);
    if (header) {
      section = new Map();
      unit.set(header[1]!, section);
      return;
    }
    const eq = line.indexOf("=");
    if (!section || eq <= 0) throw new Error(`${name}:${i + 1}: not a key=value inside a section: ${line}`);
    const key = line.slice(0, eq).trim();
    const values = section.get(key) ?? [];
    values.push(line.slice(eq + 1).trim());
    section.set(key, values);
  });
  return unit;
}

const load = (name: string) => parseUnit(readFileSync(join(UNIT_DIR, name), "utf8"), name);

function value(unit: Unit, section: string, key: string): string | undefined {
  return unit.get(section)?.get(key)?.at(-1);
}

describe("systemd units", () => {
  for (const name of UNITS) {
    test(`${name} has a description, a command and an install target`, () => {
      const u = load(name);
      assert.ok(value(u, "Unit", "Description"));
      assert.match(value(u, "Service", "ExecStart") ?? "", /^\//, "ExecStart is an absolute path");
      assert.equal(value(u, "Install", "WantedBy"), "multi-user.target");
      assert.ok(value(u, "Service", "Restart"));
    });

    // The fault suite's promise: a process killed
    // with SIGKILL (an unclean signal) is started again by systemd, as berth up does for its children.
    test(`${name} is restarted after SIGKILL`, () => {
      const u = load(name);
      assert.ok(
        ["always", "on-failure", "on-abnormal", "on-abort"].includes(value(u, "Service", "Restart") ?? ""),
        `Restart=${value(u, "Service", "Restart")} does not restart a process killed by SIGKILL`,
      );
      assert.notEqual(value(u, "Service", "RestartPreventExitStatus"), "SIGKILL");
    });
  }

  test("berth-agent.service's restart keeps the containers for the next agent to adopt", () => {
    const u = load("berth-agent.service");
    assert.equal(value(u, "Service", "KillMode"), "process");
    assert.equal(value(u, "Service", "Delegate"), "yes");
  });

  for (const [name, user, command, state] of [
    ["berth-nats.service", "berth-nats", "/usr/sbin/nats-server -c /etc/berth/nats.conf", "berth-nats"],
    [
      "berth-coordinator.service",
      "berth",
      "/usr/local/bin/berth coordinator --config /etc/berth/coordinator.json",
      "berth",
    ],
  ] as const) {
    test(`${name} runs as ${user}, hardened`, () => {
      const u = load(name);
      assert.equal(value(u, "Service", "ExecStart"), command);
      assert.equal(value(u, "Service", "User"), user);
      assert.equal(value(u, "Service", "StateDirectory"), state);
      assert.equal(value(u, "Service", "NoNewPrivileges"), "yes");
      assert.equal(value(u, "Service", "ProtectSystem"), "strict");
      assert.equal(value(u, "Service", "ProtectHome"), "yes");
      assert.equal(value(u, "Service", "PrivateTmp"), "yes");
      assert.equal(value(u, "Service", "CapabilityBoundingSet"), "", "no capabilities at all");
      assert.ok(value(u, "Service", "RestrictAddressFamilies"));
      assert.deepEqual(u.get("Service")?.get("SystemCallFilter"), ["@system-service", "~@privileged"]);
    });
  }

  test("berth-agent.service runs as root from agent.env, keeps containers on restart and owns its cgroups", () => {
    const u = load("berth-agent.service");
    assert.equal(value(u, "Service", "User"), undefined, "the agent runs as root");
    assert.equal(value(u, "Service", "EnvironmentFile"), "/etc/berth/agent.env");
    assert.equal(
      value(u, "Service", "ExecStart"),
      `/usr/local/bin/berth agent --coordinator \${BERTH_COORDINATOR} --join-token \${BERTH_JOIN_TOKEN} ` +
        "--data-dir /var/lib/berth-agent $BERTH_AGENT_ARGS",
    );
    assert.equal(value(u, "Service", "KillMode"), "process");
    assert.equal(value(u, "Service", "Delegate"), "yes");
    assert.equal(value(u, "Service", "StateDirectory"), "berth-agent");
    assert.ok(value(u, "Service", "LimitNOFILE"));
    assert.match(value(u, "Service", "CapabilityBoundingSet") ?? "", /^~.*CAP_SYS_MODULE/);
    // Settings that would give the agent a private mount namespace or a
    // seccomp filter inherited by containers must stay off (see the unit).
    for (const key of [
      "ProtectSystem",
      "ProtectHome",
      "PrivateTmp",
      "PrivateDevices",
      "SystemCallFilter",
      "NoNewPrivileges",
    ]) {
      assert.equal(value(u, "Service", key), undefined, `${key} must not be set on the agent`);
    }
  });

  test("systemd-analyze verify accepts the units", (t) => {
    if (!needs(t, { commands: ["systemd-analyze"] })) return;
    const r = spawnSync("systemd-analyze", ["verify", ...UNITS.map((n) => join(UNIT_DIR, n))], {
      encoding: "utf8",
    });
    // berth itself is installed by docs/install.md, not on a test machine.
    const problems = `${r.stdout}\n${r.stderr}`
      .split("\n")
      .filter((l) => l.trim() !== "")
      .filter((l) => !/Command \/usr\/local\/bin\/berth is not executable: No such file or directory/.test(l))
      .filter((l) => !/Command \/usr\/sbin\/nats-server is not executable/.test(l));
    assert.deepEqual(problems, []);
  });

  test("systemd-analyze security rates the coordinator and NATS units at exposure 2.5 or lower", (t) => {
    if (!needs(t, { commands: ["systemd-analyze"] })) return;
    const help = execFileSync("systemd-analyze", ["security", "--help"], { encoding: "utf8" });
    if (!help.includes("--offline")) {
      unavailable(t, "systemd-analyze has no --offline (systemd < 250; Debian bookworm ships 252)");
      return;
    }
    for (const name of ["berth-nats.service", "berth-coordinator.service"]) {
      const r = spawnSync("systemd-analyze", ["security", "--offline=yes", join(UNIT_DIR, name)], {
        encoding: "utf8",
      });
      const m = /Overall exposure level for \S+: ([\d.]+)/.exec(r.stdout + r.stderr);
      assert.ok(m, `no exposure level in: ${r.stdout}${r.stderr}`);
      assert.ok(Number(m[1]) <= 2.5, `${name} exposure ${m[1]}`);
    }
  });
});
