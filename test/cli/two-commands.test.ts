// The README's two commands: `npm start` installs what running berth needs
// (never a test tool) and leaves `berth` on the PATH; `npm test` adds the test
// tools. Read from package.json and scripts/ensure-deps.sh, never by running
// apt or npm here. The `berth` bin runs from a checkout without `npm run build`.

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { BERTH_VERSION } from "../../shared/version.ts";
import { tempDir } from "../helpers/env.ts";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
  bin: Record<string, string>;
  files: string[];
  scripts: Record<string, string>;
};
const ensureDeps = readFileSync(join(ROOT, "scripts", "ensure-deps.sh"), "utf8");

/** A bash array of ensure-deps.sh, `name=(a b c)`. */
function packages(name: string): string[] {
  const m = new RegExp(`^${name}=\\(([^)]*)\\)`, "m").exec(ensureDeps);
  assert.ok(m, `scripts/ensure-deps.sh defines ${name}`);
  return m[1]!.trim().split(/\s+/);
}

/** What only the test suite uses: never installed by `npm start`. */
const TEST_TOOLS = ["postgresql", "chromium", "systemd", "curl", "python3-torch"];
/** What running berth needs (berth up, the agent, code and buckets). */
const RUN_NEEDS = [
  "nats-server",
  "runc",
  "nftables",
  "iptables",
  "iproute2",
  "procps",
  "skopeo",
  "umoci",
  "e2fsprogs",
  "python3",
  "python3-cloudpickle",
  "debootstrap",
  "docker-registry",
  "s3fs",
  "fuse3",
];

test("npm start installs the run-time packages only; npm test adds the test tools", () => {
  assert.match(pkg.scripts.start!, /^bash scripts\/ensure-deps\.sh runtime && /);
  assert.match(pkg.scripts.test!, /^bash scripts\/ensure-deps\.sh test && bash scripts\/test\.sh$/);
  const runtime = packages("runtime_pkgs");
  const testOnly = packages("test_pkgs");
  for (const p of TEST_TOOLS) {
    assert.ok(!runtime.includes(p), `${p} is a test tool, not a run-time package`);
    assert.ok(testOnly.includes(p), `npm test installs ${p}`);
  }
  assert.deepEqual(
    runtime.filter((p) => testOnly.includes(p)),
    [],
    "no package in both lists",
  );
  for (const p of RUN_NEEDS) assert.ok(runtime.includes(p), `npm start installs ${p}`);
  // The mode picks the list: runtime alone, test both; anything else is refused.
  assert.match(ensureDeps, /runtime\) pkgs=\("\$\{runtime_pkgs\[@\]\}"\) ;;/);
  assert.match(ensureDeps, /test\) pkgs=\("\$\{runtime_pkgs\[@\]\}" "\$\{test_pkgs\[@\]\}"\) ;;/);
  // The PostgreSQL cluster setting is only written when postgresql itself is installed.
  assert.match(
    readFileSync(join(ROOT, "scripts", "lib", "debian.sh"), "utf8"),
    /grep -qx postgresql .*createcluster\.conf/,
  );
});

test("the README names Node 20+ as the prerequisite and every package the scripts install", () => {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const section = readme.slice(
    readme.indexOf("## The two commands"),
    readme.indexOf("\n## ", readme.indexOf("## The two commands") + 5),
  );
  assert.match(section, /Node\.js 20 or newer/);
  for (const p of [...packages("runtime_pkgs"), ...packages("test_pkgs")])
    assert.match(
      section,
      new RegExp(`\\b${p.replace(/[.+]/g, "\\$&")}\\b`),
      `README's two commands name ${p}`,
    );
});

test("the berth bin runs from a checkout without a build, and from the package's bundle", (t) => {
  const bin = pkg.bin.berth!;
  assert.equal(bin, "bin/berth.js");
  assert.ok(pkg.files.includes("bin/"), "npm pack ships bin/");
  const run = (file: string) => spawnSync(process.execPath, [file, "--version"], { encoding: "utf8" });
  const real = run(join(ROOT, bin));
  assert.equal(real.status, 0, real.stderr);
  assert.equal(real.stdout.trim(), BERTH_VERSION);

  // A checkout with no dist/ at all: the bin runs the sources.
  const clone = tempDir(t, "berth-bin-clone-");
  mkdirSync(join(clone, "bin"));
  copyFileSync(join(ROOT, bin), join(clone, bin));
  copyFileSync(join(ROOT, "package.json"), join(clone, "package.json"));
  for (const d of ["cli", "node_modules"]) symlinkSync(join(ROOT, d), join(clone, d));
  assert.equal(existsSync(join(clone, "dist")), false);
  const fromSources = run(join(clone, bin));
  assert.equal(fromSources.status, 0, fromSources.stderr);
  assert.equal(fromSources.stdout.trim(), BERTH_VERSION);

  // The installed package (no sources, the bundle): the bin runs the bundle's entry.
  const installed = tempDir(t, "berth-bin-package-");
  mkdirSync(join(installed, "bin"));
  mkdirSync(join(installed, "dist", "cli"), { recursive: true });
  copyFileSync(join(ROOT, bin), join(installed, bin));
  copyFileSync(join(ROOT, "package.json"), join(installed, "package.json"));
  writeFileSync(join(installed, "dist", "cli", "berth.js"), 'process.stdout.write("the bundle\\n");\n');
  const fromBundle = run(join(installed, bin));
  assert.equal(fromBundle.status, 0, fromBundle.stderr);
  assert.equal(fromBundle.stdout, "the bundle\n");
});

test("ensure-deps puts this checkout's berth on the PATH and leaves another berth alone", (t) => {
  const dir = tempDir(t, "berth-bin-dir-");
  const link = (binDir: string) =>
    spawnSync("bash", ["-c", 'source scripts/lib/berth-link.sh && link_berth_command "$1"', "link", binDir], {
      cwd: ROOT,
      encoding: "utf8",
    });
  const first = link(dir);
  assert.equal(first.status, 0, first.stderr);
  assert.match(first.stdout, /linked .*berth -> .*bin\/berth\.js/);
  assert.equal(readlinkSync(join(dir, "berth")), join(ROOT, "bin", "berth.js"));
  const viaPath = spawnSync("berth", ["--version"], {
    encoding: "utf8",
    env: { ...process.env, PATH: `${dir}:${process.env.PATH}` },
  });
  assert.equal(viaPath.status, 0, viaPath.stderr);
  assert.equal(viaPath.stdout.trim(), BERTH_VERSION);
  assert.equal(link(dir).stdout, "", "a second run changes nothing");

  const other = tempDir(t, "berth-bin-other-");
  writeFileSync(join(other, "berth"), "#!/bin/sh\necho packaged\n", { mode: 0o755 });
  const kept = link(other);
  assert.equal(kept.status, 0, kept.stderr);
  assert.match(kept.stdout, /is another berth .* leaving it/);
  assert.equal(lstatSync(join(other, "berth")).isSymbolicLink(), false);
  assert.equal(readFileSync(join(other, "berth"), "utf8"), "#!/bin/sh\necho packaged\n");
});
