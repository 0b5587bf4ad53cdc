// From the SDK's Image spec (sdk/python/berth/api/image.py spec()) to the
// agent's build request: the commands, in the order added, then one pip step
// for the Python packages, against the cluster's package index.

import type { BuildImageRequest, BuildStep } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";

/** The Image spec as the SDK sends it (names only for credentials and secrets). */
export interface ImageSpec {
  python_version?: string;
  python_packages?: string[];
  commands?: string[];
  base_image?: string | null;
  base_image_creds?: string[];
  env_vars?: string[];
  build_with_gpu?: string | null;
  snapshot_id?: string | null;
  dockerfile?: unknown;
  secrets?: string[];
  micromamba?: boolean;
  micromamba_packages?: string[];
  micromamba_channels?: string[];
  /** The pool whose agents build it (docs/pools.md); any agent when absent. */
  pool?: string | null;
}

/** The package index every pip step uses (coordinator option `pipIndex`; docs/images.md). */
export interface PipIndex {
  indexUrl?: string;
  extraIndexUrls?: string[];
  trustedHosts?: string[];
}

/** Whether the spec asks for a build at all (otherwise the base image runs as it is). */
export function needsBuild(spec: ImageSpec): boolean {
  return (
    (spec.commands?.length ?? 0) > 0 ||
    (spec.python_packages?.length ?? 0) > 0 ||
    (spec.env_vars?.length ?? 0) > 0 ||
    spec.micromamba === true ||
    (spec.micromamba_packages?.length ?? 0) > 0 ||
    !!spec.build_with_gpu
  );
}

/** Single-quoted for sh. */
export const shellQuote = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/** Parts of the spec this cluster's builds do not do; each is refused by name. */
function unsupported(spec: ImageSpec): string[] {
  const out: string[] = [];
  if (spec.snapshot_id) out.push("a snapshot base (from_id) with build steps");
  return out;
}

function envOf(entries: string[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const e of entries) {
    const eq = e.indexOf("=");
    const k = eq > 0 ? e.slice(0, eq) : "";
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) {
      throw new BerthError(
        "invalid_request",
        `image environment variable ${JSON.stringify(e)} is not KEY=VALUE`,
      );
    }
    env[k] = e.slice(eq + 1);
  }
  return env;
}

/**
 * pip is used as the image has it; an image without it (Debian's python3)
 * gets Debian's python3-pip first, as a step of its own so every image on
 * that base shares its cached layer.
 */
export const ENSURE_PIP_STEP: BuildStep = {
  name: "ensure pip",
  run: "python3 -m pip --version >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-pip; }",
};

/**
 * One pip install of every package, against the cluster's index.
 * PIP_BREAK_SYSTEM_PACKAGES lets pip install beside Debian's own packages
 * (PEP 668), as a container image wants.
 */
export function pipStep(packages: string[], index: PipIndex): BuildStep {
  const args = ["--no-cache-dir", "--disable-pip-version-check", "--no-input"];
  if (index.indexUrl) args.push("--index-url", index.indexUrl);
  for (const u of index.extraIndexUrls ?? []) args.push("--extra-index-url", u);
  for (const h of index.trustedHosts ?? []) args.push("--trusted-host", h);
  const run = `PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install ${args.map(shellQuote).join(" ")} ${packages.map(shellQuote).join(" ")}`;
  return { name: `pip install ${packages.join(" ")}`, run };
}

/** Where micromamba installs: an environment whose bin dir leads PATH at build and at run. */
export const CONDA_PREFIX = "/opt/conda";
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/** "python3.11" → "python=3.11"; empty: the channel's python. */
function condaPython(version: string | undefined): string {
  const m = /^python(\d+(?:\.\d+)*)$/.exec(version ?? "");
  return m ? `python=${m[1]}` : "python";
}

/**
 * One micromamba install into CONDA_PREFIX of python (the spec's version)
 * and the packages, from the image's channels then the cluster's
 * (`condaChannels`), those only (--override-channels) when any is named.
 * The agent puts its configured micromamba on the step's PATH where the
 * image has none (BuildStep.micromamba).
 */
export function micromambaStep(spec: ImageSpec, clusterChannels: readonly string[]): BuildStep {
  const packages = [condaPython(spec.python_version), ...(spec.micromamba_packages ?? [])];
  const channels = [...new Set([...(spec.micromamba_channels ?? []), ...clusterChannels])];
  const args = ["install", "--yes", "--root-prefix", CONDA_PREFIX, "--prefix", CONDA_PREFIX];
  if (channels.length > 0) args.push("--override-channels", ...channels.flatMap((c) => ["-c", c]));
  const run = `micromamba ${[...args, ...packages].map(shellQuote).join(" ")} && micromamba clean --all --yes --root-prefix ${CONDA_PREFIX}`;
  return { name: `micromamba install ${packages.join(" ")}`, run, micromamba: true };
}

/** The agent's build request for `spec`; refuses what builds cannot do, naming it. */
/** `dockerfile`: the Dockerfile's own base and steps, which the spec's commands and packages follow. */
export function buildRequestOf(
  spec: ImageSpec,
  index: PipIndex & { condaChannels?: readonly string[] },
  dockerfile?: { baseImage: string; steps: BuildStep[]; env: Record<string, string> },
): BuildImageRequest {
  if (spec.dockerfile && !dockerfile) {
    throw new BerthError(
      "invalid_request",
      "a from_dockerfile image needs the Dockerfile's text and its context archive",
    );
  }
  const missing = unsupported(spec);
  if (missing.length > 0) {
    throw new BerthError(
      "failed_precondition",
      `this cluster's image builds do not do ${missing.join("; ")} yet: build with commands, python_packages and env_vars on a public base image`,
    );
  }
  const steps: BuildStep[] = [...(dockerfile?.steps ?? [])];
  for (const c of spec.commands ?? []) {
    if (typeof c !== "string" || c.trim() === "")
      throw new BerthError("invalid_request", "an image command is empty");
    steps.push({ name: c.length > 200 ? `${c.slice(0, 197)}...` : c, run: c });
  }
  const mamba = spec.micromamba === true || (spec.micromamba_packages?.length ?? 0) > 0;
  if (mamba) steps.push(micromambaStep(spec, index.condaChannels ?? []));
  const packages = (spec.python_packages ?? []).filter((p) => typeof p === "string" && p.trim() !== "");
  if (packages.length > 0) steps.push(ENSURE_PIP_STEP, pipStep(packages, index));
  const req: BuildImageRequest = {
    steps,
    env: {
      // The environment's python and tools first, at build (pip steps) and at run.
      ...(mamba ? { PATH: `${CONDA_PREFIX}/bin:${DEFAULT_PATH}` } : {}),
      ...(dockerfile?.env ?? {}),
      ...envOf(spec.env_vars ?? []),
    },
  };
  if (spec.build_with_gpu) {
    if (typeof spec.build_with_gpu !== "string" || !/^[A-Za-z0-9][A-Za-z0-9_.-]*$/.test(spec.build_with_gpu))
      throw new BerthError(
        "invalid_request",
        `build_with_gpu ${JSON.stringify(spec.build_with_gpu)} is not a GPU type`,
      );
    req.gpu = { count: 1, types: [spec.build_with_gpu] };
  }
  const base = dockerfile?.baseImage ?? spec.base_image;
  if (base) req.baseImage = base;
  return req;
}
