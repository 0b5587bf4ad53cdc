import assert from "node:assert/strict";
import { test } from "node:test";
import {
  DEFAULT_AGENT_SOCKET,
  keyValues,
  parseCpu,
  parseGpuTypes,
  parseMemory,
  parsePort,
  parseSecondsMs,
  resolveAgentSocket,
} from "../../cli/edge/args.ts";
import { buildRunRequest, egressFromFlags, exitOutcome } from "../../cli/edge/run.ts";
import { age, psRow } from "../../cli/edge/show.ts";
import { BerthError } from "../../shared/errors.ts";
import { sampleStatus } from "../helpers/wire-samples.ts";

const invalid = (re: RegExp) => (e: unknown) =>
  e instanceof BerthError && e.code === "invalid_request" && re.test(e.message);

test("memory sizes: binary and decimal units, plain numbers are MiB", () => {
  assert.equal(parseMemory("64Mi"), 64 * 2 ** 20);
  assert.equal(parseMemory("2Gi"), 2 * 2 ** 30);
  assert.equal(parseMemory("1.5Gi"), 1.5 * 2 ** 30);
  assert.equal(parseMemory("512Ki"), 512 * 1024);
  assert.equal(parseMemory("1Ti"), 2 ** 40);
  assert.equal(parseMemory("512M"), 512_000_000);
  assert.equal(parseMemory("2G"), 2_000_000_000);
  assert.equal(parseMemory("100K"), 100_000);
  assert.equal(parseMemory("4096B"), 4096);
  assert.equal(parseMemory("128"), 128 * 2 ** 20);
  assert.equal(parseMemory(" 64Mi "), 64 * 2 ** 20);
  assert.throws(() => parseMemory("64mi"), invalid(/--memory "64mi" has an unknown unit "mi": use Ki, Mi/));
  assert.throws(() => parseMemory("64MB"), invalid(/unknown unit "MB"/));
  assert.throws(() => parseMemory("0"), invalid(/must be more than zero/));
  assert.throws(() => parseMemory("-1Gi"), invalid(/is not a size like 64Mi/));
  assert.throws(() => parseMemory("lots"), invalid(/is not a size/));
  assert.throws(() => parseMemory(""), invalid(/is not a size/));
  assert.throws(() => parseMemory("99999999999Ti"), invalid(/too large/));
});

test("cpu, ports, seconds and GPU types", () => {
  assert.equal(parseCpu("0.5"), 0.5);
  assert.equal(parseCpu("4"), 4);
  for (const bad of ["0", "-1", "", "two", "Infinity"]) assert.throws(() => parseCpu(bad), invalid(/--cpu/));
  assert.equal(parsePort("8080"), 8080);
  for (const bad of ["0", "65536", "80a", "-1"]) assert.throws(() => parsePort(bad), invalid(/--port/));
  assert.equal(parseSecondsMs("2.5", "--grace"), 2500);
  assert.equal(parseSecondsMs("0", "--grace", { allowZero: true }), 0);
  assert.throws(() => parseSecondsMs("0", "--timeout"), invalid(/--timeout "0" must be a positive/));
  assert.deepEqual(parseGpuTypes("H100,A100"), ["H100", "A100"]);
  assert.throws(() => parseGpuTypes("H100,,A100"), invalid(/comma-separated/));
});

test("KEY=VALUE flags: values may be empty or hold '=', keys may not repeat", () => {
  assert.equal(keyValues([], "--env"), undefined);
  assert.deepEqual(keyValues(["A=1", "B=", "C=x=y", "D= spaced "], "--env"), {
    A: "1",
    B: "",
    C: "x=y",
    D: " spaced ",
  });
  assert.throws(() => keyValues(["NOEQUALS"], "--env"), invalid(/--env "NOEQUALS" must be KEY=VALUE/));
  assert.throws(() => keyValues(["=v"], "--label"), invalid(/--label "=v" must be KEY=VALUE/));
  assert.throws(() => keyValues(["A=1", "A=2"], "--env"), invalid(/--env A is given twice/));
});

test("the socket: --socket, then an explicit --data-dir, then $BERTH_AGENT_SOCKET, then the default", () => {
  const env = { BERTH_AGENT_SOCKET: "/run/berth/a.sock" };
  assert.equal(resolveAgentSocket({ socket: "/x/s.sock", dataDir: "/d", env }), "/x/s.sock");
  assert.equal(resolveAgentSocket({ dataDir: "/srv/agent/", env }), "/srv/agent/agent.sock");
  assert.equal(resolveAgentSocket({ env }), "/run/berth/a.sock");
  assert.equal(resolveAgentSocket({ env: {} }), DEFAULT_AGENT_SOCKET);
  assert.equal(resolveAgentSocket({ socket: "rel.sock", env: {} }), `${process.cwd()}/rel.sock`);
});

test("with none of those, the socket of `berth up`'s agent (from the profile) when it exists, else the default", () => {
  const up = "/home/u/.berth/up/agent/agent.sock";
  const present = (paths: string[]) => (p: string) => paths.includes(p);
  const env = { BERTH_AGENT_SOCKET: "/run/berth/a.sock" };
  // Anything given explicitly still wins.
  assert.equal(resolveAgentSocket({ env, upSocket: up, exists: present([up]) }), "/run/berth/a.sock");
  assert.equal(
    resolveAgentSocket({ dataDir: "/d", env: {}, upSocket: up, exists: present([up]) }),
    "/d/agent.sock",
  );
  assert.equal(
    resolveAgentSocket({ env: {}, upSocket: up, exists: present([up, DEFAULT_AGENT_SOCKET]) }),
    up,
  );
  // berth up is not running but a systemd agent is: that one.
  assert.equal(
    resolveAgentSocket({ env: {}, upSocket: up, exists: present([DEFAULT_AGENT_SOCKET]) }),
    DEFAULT_AGENT_SOCKET,
  );
  // Neither runs: the error names berth up's socket.
  assert.equal(resolveAgentSocket({ env: {}, upSocket: up, exists: present([]) }), up);
});

test("run flags become a RunContainerRequest with defaults and only what was given", () => {
  assert.deepEqual(buildRunRequest("alpine", [], {}), {
    image: "alpine",
    args: [],
    cpu: 1,
    memoryBytes: 128 * 2 ** 20,
  });
  assert.deepEqual(
    buildRunRequest("python:3.12", ["python", "-c", "print(1)"], {
      memory: "64Mi",
      cpu: "0.5",
      gpus: "2",
      gpuType: "H100,A100",
      env: ["A=1"],
      name: "ctr-a",
      label: ["app=web"],
      allow: ["10.1.2.3/8"],
      port: ["8080", "8080", "22"],
      timeout: "90",
      workdir: "/w",
      user: "1000",
    }),
    {
      image: "python:3.12",
      args: ["python", "-c", "print(1)"],
      cpu: 0.5,
      memoryBytes: 64 * 2 ** 20,
      id: "ctr-a",
      env: { A: "1" },
      labels: { app: "web" },
      gpu: { count: 2, types: ["H100", "A100"] },
      egress: { mode: "allow", cidrs: ["10.0.0.0/8"] },
      exposedPorts: [8080, 22],
      timeoutMs: 90_000,
      cwd: "/w",
      user: "1000",
    },
  );
  assert.throws(() => buildRunRequest("a", [], { gpuType: "H100" }), invalid(/--gpu-type needs --gpus/));
  assert.throws(
    () => buildRunRequest("a", [], { blockNetwork: true, allow: ["10.0.0.0/8"] }),
    invalid(/--block-network and --allow cannot be combined/),
  );
  assert.throws(() => buildRunRequest("a", [], { allow: ["10.0.0.1"] }), invalid(/not in CIDR notation/));
});

test("egress flags: exactly one of block, allow, open", () => {
  assert.equal(egressFromFlags({}), undefined);
  assert.deepEqual(egressFromFlags({ blockNetwork: true }), { mode: "block" });
  assert.deepEqual(egressFromFlags({ open: true }), { mode: "open" });
  assert.deepEqual(egressFromFlags({ allow: ["fd00::1/8", "10.0.0.0/8"] }), {
    mode: "allow",
    cidrs: ["fd00::/8", "10.0.0.0/8"],
  });
  assert.throws(() => egressFromFlags({ open: true, allow: ["10.0.0.0/8"] }), invalid(/--allow and --open/));
});

test("how an ended container is reported", () => {
  const stopped = (over: Parameters<typeof sampleStatus>[1]) =>
    sampleStatus("ctr-x", { state: "stopped", ...over });
  assert.deepEqual(exitOutcome(stopped({ reason: "exited", exitCode: 0 })), { code: 0 });
  assert.deepEqual(exitOutcome(stopped({ reason: "exited", exitCode: 42 })), { code: 42 });
  assert.deepEqual(exitOutcome(stopped({ reason: "oom_killed", exitCode: 137, memoryBytes: 64 * 2 ** 20 })), {
    code: 137,
    message: "container ctr-x was OOM-killed (memory limit 64 MiB)",
  });
  assert.deepEqual(exitOutcome(stopped({ reason: "killed" })), {
    code: 137,
    message: "container ctr-x was killed",
  });
  assert.deepEqual(exitOutcome(stopped({ reason: "timed_out", exitCode: 137 }), 5000), {
    code: 137,
    message: "container ctr-x timed out after 5 s and was killed",
  });
  assert.equal(exitOutcome(stopped({ reason: "unknown" })).code, 1);
});

test("ps rows", () => {
  const now = 1_700_000_000_123 + 125_000;
  assert.deepEqual(psRow(sampleStatus("ctr-a"), now), {
    id: "ctr-a",
    image: "docker.io/library/python:3.12-slim",
    state: "running",
    cpu: 0.5,
    memory: "64 MiB",
    created: "2m ago",
    exit: null,
  });
  assert.equal(
    psRow(sampleStatus("b", { state: "stopped", exitCode: 137, reason: "oom_killed" }), now).exit,
    "137 (oom_killed)",
  );
  assert.equal(psRow(sampleStatus("c", { state: "stopped", exitCode: 0, reason: "exited" }), now).exit, "0");
  assert.equal(age(now - 3 * 86_400_000, now), "3d ago");
});
