// What `berth agent join` installs on a bare Debian or Ubuntu host before it
// sets the agent up (docs/install.md, "Agents"): the Debian packages an agent
// runs with. They are scripts/ensure-deps.sh's runtime packages less those
// only the machine that runs `berth up` or the coordinator needs
// (nats-server, docker-registry, debootstrap); test/systemd/agent-join.test.ts
// keeps the two lists in step. A host without dpkg gets the list to install
// by its own means.

import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { BerthError } from "../../shared/errors.ts";

const run = promisify(execFile);

export const AGENT_DEBIAN_PACKAGES = [
  "runc",
  "nftables",
  "skopeo",
  "umoci",
  "zstd",
  "iproute2",
  "python3",
  "python3-cloudpickle",
  "iptables",
  "procps",
  "s3fs",
  "fuse3",
  "e2fsprogs",
  "crun",
  "runsc",
] as const;

/** scripts/ensure-deps.sh's runtime packages an agent host does without. */
export const NOT_ON_AGENTS = ["nats-server", "docker-registry", "debootstrap"] as const;

/** Those of `packages` dpkg does not list as installed; undefined on a host without dpkg-query. */
export async function missingDebianPackages(packages: readonly string[]): Promise<string[] | undefined> {
  let out: string;
  try {
    out = (await run("dpkg-query", ["-W", `-f=\${Package} \${Status}\\n`, ...packages])).stdout;
  } catch (e) {
    const err = e as NodeJS.ErrnoException & { stdout?: string };
    if (err.code === "ENOENT") return undefined;
    // It exits 1 when some package is unknown to it, and still lists the others.
    out = err.stdout ?? "";
  }
  const installed = new Set(
    out
      .split("\n")
      .filter((l) => l.endsWith(" install ok installed"))
      .map((l) => l.split(" ")[0]),
  );
  return packages.filter((p) => !installed.has(p));
}

/** Installs what the agent needs and this host lacks (apt-get, as root); says what it did. */
export async function ensureAgentPackages(log: (line: string) => void): Promise<void> {
  const missing = await missingDebianPackages(AGENT_DEBIAN_PACKAGES);
  if (missing === undefined)
    throw new BerthError(
      "failed_precondition",
      `this host has no dpkg: install what the agent needs by your system's means (Debian names: ${AGENT_DEBIAN_PACKAGES.join(" ")}) and give --no-install-deps`,
    );
  if (missing.length === 0) {
    log("the agent's Debian packages are installed");
    return;
  }
  if (process.getuid?.() !== 0)
    throw new BerthError(
      "permission_denied",
      `missing Debian packages: ${missing.join(" ")}; run berth agent join as root (e.g. with sudo)`,
    );
  log(`installing Debian packages: ${missing.join(" ")}`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  for (const args of [
    ["update", "-qq"],
    ["install", "-y", "-qq", "--no-install-recommends", ...missing],
  ]) {
    try {
      await run("apt-get", args, { env, timeout: 900_000, maxBuffer: 64 << 20 });
    } catch (e) {
      const err = e as { stderr?: string; message: string };
      throw new BerthError(
        "unavailable",
        `apt-get ${args[0]} failed: ${(err.stderr || err.message).trim().slice(-1500)} (nothing of berth's was written)`,
      );
    }
  }
}
