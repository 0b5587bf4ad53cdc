// The agent strategy's own version of the toolkit's createContainer hooks
// (docs/gpus.md): the driver libraries are bind-mounted at the host's paths,
// which an image's loader may not search (a RHEL image on a Debian host), so
// the container's ld.so.cache is rebuilt with those directories, as
// `nvidia-ctk hook update-ldcache` does; `libcuda.so`, the name some code
// dlopens, is given where the host has only `libcuda.so.1`, as
// `nvidia-ctk hook create-symlinks` does.
//
// The hook runs as OCI createContainer hooks do: in the container's mount
// namespace after its mounts, before pivot_root, with the container's state
// (its bundle) on stdin. It runs the host's ldconfig with -r, which chroots
// into the container's root before it reads or writes anything there, so
// nothing the image holds (a symlinked /etc) reaches the host. -X: the
// library files are read-only bind mounts; their links are mounted too.
//
// CUDA forward compatibility, as `nvidia-ctk hook enable-cuda-compat` does:
// an image built for a newer CUDA than the host's driver carries the newer
// user-mode driver in /usr/local/cuda/compat (libcuda.so.<version>); when
// that version is above the host driver's, the directory goes first, so the
// loader takes its libcuda. (The listing is read from the host side; only
// file names decide, and ldconfig resolves the directory inside the root.)

import { basename, dirname, join } from "node:path";
import type { GpuHook, GpuMount } from "./injection-types.ts";

/** Node's program for the hook: argv ldconfig, host driver version, dirs...; the OCI state on stdin. CommonJS, no files. */
const HOOK_SCRIPT = [
  'const fs = require("node:fs"), path = require("node:path"), cp = require("node:child_process");',
  'const state = JSON.parse(fs.readFileSync(0, "utf8"));',
  'const config = JSON.parse(fs.readFileSync(path.join(state.bundle, "config.json"), "utf8"));',
  "const root = path.resolve(state.bundle, config.root.path);",
  "const [ldconfig, driver, ...dirs] = process.argv.slice(1);",
  'const parts = (v) => v.split(".").map(Number);',
  "const newer = (a, b) => { for (let i = 0; i < 4; i++) { const d = (parts(a)[i] || 0) - (parts(b)[i] || 0); if (d) return d > 0; } return false; };",
  // A root without /etc (a scratch image) gets one for the cache; an existing one, even a symlink, is left.
  'try { fs.mkdirSync(path.join(root, "etc"), { mode: 0o755 }); } catch {}',
  "let compat = [];",
  "try {",
  '  const names = driver ? fs.readdirSync(path.join(root, "usr/local/cuda/compat")) : [];',
  "  const versions = names.map((n) => /^libcuda\\.so\\.(\\d+(?:\\.\\d+)+)$/.exec(n)).filter(Boolean).map((m) => m[1]);",
  '  if (versions.some((v) => newer(v, driver))) compat = ["/usr/local/cuda/compat"];',
  "} catch {}",
  'const r = cp.spawnSync(ldconfig, ["-X", "-r", root, ...compat, ...dirs], { stdio: ["ignore", "inherit", "inherit"] });',
  "process.exit(r.status === null ? 1 : r.status);",
].join("\n");

export interface LdcacheHookHost {
  /** The host's node, which runs the hook (the agent's own: process.execPath). */
  nodePath: string;
  /** The host's ldconfig (found as `ldconfig -p` is). */
  ldconfigPath: string;
}

/**
 * The createContainer hook that adds `dirs` to the container's ld.so.cache, behind the image's
 * CUDA compat directory when that is newer than `driverVersion` (the host's; "" skips that).
 */
export function ldcacheHook(host: LdcacheHookHost, dirs: readonly string[], driverVersion = ""): GpuHook {
  return {
    path: host.nodePath,
    args: ["node", "-e", HOOK_SCRIPT, "--", host.ldconfigPath, driverVersion, ...dirs],
    timeout: 30,
  };
}

/** The driver version in the name of the host's libcuda file (libcuda.so.550.54.15), or "". */
export function driverVersionOf(libraryPaths: readonly string[]): string {
  for (const p of libraryPaths) {
    const m = /^libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$/.exec(basename(p));
    if (m) return m[1]!;
  }
  return "";
}

/** The directories the library mounts put files in, in first-seen order. */
export function libraryDirs(mounts: readonly GpuMount[]): string[] {
  return [...new Set(mounts.map((m) => dirname(m.destination)))];
}

/**
 * A `libcuda.so` next to `libcuda.so.1` where the host lists none: the file libcuda.so.1 leads
 * to, bind-mounted under that name (a bind mount stands in for the toolkit's symlink).
 */
export function libcudaDevName(mounts: readonly GpuMount[], realOf: (p: string) => string): GpuMount[] {
  const so1 = mounts.find((m) => basename(m.destination) === "libcuda.so.1");
  if (!so1) return [];
  const dest = join(dirname(so1.destination), "libcuda.so");
  if (mounts.some((m) => m.destination === dest)) return [];
  return [{ ...so1, source: realOf(so1.source), destination: dest }];
}
