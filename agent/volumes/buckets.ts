// Cloud bucket mounts (docs/buckets.md): each bucket of a container is
// mounted with s3fs on the host at <dir>/<container id>/mnt/<bucket> and
// bind-mounted into the container; everything under <dir>/<container id> is
// unmounted and removed when the container stops, is removed, or is found
// dead by a restarted agent.
//
// s3fs runs in the foreground (-f) in a session of its own, so it outlives an
// agent restart as the containers do (the unit's KillMode=process). It checks
// the bucket and the keys only once the FUSE mount exists (s3fs_init), so
// success is known when a stat of the mountpoint returns (the kernel holds
// every request until s3fs answers FUSE_INIT) and s3fs has not reported a
// failed check (it prints that before it answers INIT). The keys travel in a
// passwd file (0600, in a 0700 directory) that s3fs reads before it mounts and
// that is deleted as soon as the mount appears, or on failure.

import { type ChildProcess, execFile, spawn } from "node:child_process";
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { BucketMount } from "../../api/index.ts";
import { checkBucketEndpoint, checkBucketName, checkBucketRegion } from "../../shared/buckets.ts";
import { BerthError, invalid } from "../../shared/errors.ts";
import { SingleFlight } from "../single-flight.ts";
import { checkMountPath } from "../../shared/volumes.ts";
import type { BindMount } from "../runtime/index.ts";
import { type ReadOnlyParent, volumeDestination } from "./volumes.ts";

const run = promisify(execFile);

/** AWS S3, s3fs's own default, when a bucket names no endpoint. */
export const DEFAULT_BUCKET_ENDPOINT = "https://s3.amazonaws.com";
/** How long a mount may take (s3fs retries an unreachable endpoint for about 20 s). */
const MOUNT_TIMEOUT_MS = 60_000;
/** How long an unmounted s3fs gets to finish its uploads and exit before SIGKILL. */
const EXIT_WAIT_MS = 10_000;

/** The request's buckets, type-checked by the rules the coordinator uses; names unique. */
export function checkBucketMounts(v: unknown): BucketMount[] {
  if (v === undefined || v === null) return [];
  if (!Array.isArray(v)) throw invalid("buckets must be a list of { name, mountPath, ... }", { field: "buckets" });
  const seen = new Set<string>();
  return v.map((m, i) => {
    if (typeof m !== "object" || m === null) throw invalid(`buckets[${i}] must be an object`, { field: `buckets[${i}]` });
    const r = m as Record<string, unknown>;
    const name = checkBucketName(r.name, `buckets[${i}].name`);
    if (seen.has(name)) throw invalid(`cloud bucket ${name} is listed twice`, { field: `buckets[${i}].name` });
    seen.add(name);
    const out: BucketMount = { name, mountPath: checkMountPath(r.mountPath, `buckets[${i}].mountPath`) };
    if (r.readOnly === true) out.readOnly = true;
    if (r.endpoint !== undefined) out.endpoint = checkBucketEndpoint(r.endpoint, name, `buckets[${i}].endpoint`);
    if (r.region !== undefined) out.region = checkBucketRegion(r.region, name, `buckets[${i}].region`);
    const key = (k: "accessKey" | "secretKey") => {
      const s = r[k];
      if (s === undefined) return undefined;
      // A passwd line is KEY:SECRET; a newline or a colon in the key would break it.
      if (typeof s !== "string" || s === "" || /[\n\r\0]/.test(s) || (k === "accessKey" && s.includes(":")))
        throw invalid(`cloud bucket ${name}: ${k} is not a usable key`, { field: `buckets[${i}].${k}` });
      return s;
    };
    const accessKey = key("accessKey");
    const secretKey = key("secretKey");
    if ((accessKey === undefined) !== (secretKey === undefined))
      throw invalid(`cloud bucket ${name}: give both keys or neither`, { field: `buckets[${i}]` });
    if (accessKey !== undefined && secretKey !== undefined) Object.assign(out, { accessKey, secretKey });
    return out;
  });
}

/** Mount points listed in /proc/self/mountinfo (the agent's, which s3fs shares). */
function mountedPaths(): Set<string> {
  const out = new Set<string>();
  for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
    const f = line.split(" ");
    if (f[4]) out.add(f[4].replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8))));
  }
  return out;
}

/** What s3fs's failed bucket check says, as an error naming the bucket (never a key). */
function mountFailure(b: BucketMount, endpoint: string, log: string, exited: boolean): BerthError {
  const lines = log.split("\n").filter((l) => /\[(CRT|ERR)\]/.test(l));
  const said = (lines.at(-1) ?? "").replace(/^.*?\]\s*(\S+:\s*)?/, "").trim();
  const where = `at ${endpoint}`;
  if (/invalid credentials/i.test(log))
    return new BerthError("permission_denied", `cloud bucket ${b.name}: the access key or secret key was refused ${where}`, { bucket: b.name });
  if (/bucket or key not found|NoSuchBucket/i.test(log))
    return new BerthError("not_found", `cloud bucket ${b.name}: no such bucket ${where}`, { bucket: b.name });
  if (/unable to connect|could not connect|timeout/i.test(log))
    return new BerthError("unavailable", `cloud bucket ${b.name}: cannot reach ${endpoint}`, { bucket: b.name });
  const why = said || (exited ? "s3fs exited without saying why" : "the mount went away");
  return new BerthError("failed_precondition", `cloud bucket ${b.name}: mounting ${where} failed: ${why}`, { bucket: b.name });
}

export interface BucketMountsOptions {
  /** Per-container directories live here (the host's root/buckets). */
  dir: string;
  logger: {
    info(obj: object, msg?: string): void;
    warn(obj: object, msg?: string): void;
    error(obj: object, msg?: string): void;
  };
  /** @default "s3fs" */
  s3fs?: string;
}

export class BucketMounts {
  private readonly unmounting = new SingleFlight<void>();
  private readonly s3fs: string;

  constructor(private readonly o: BucketMountsOptions) {
    this.s3fs = o.s3fs ?? "s3fs";
    mkdirSync(o.dir, { recursive: true, mode: 0o700 });
  }

  private containerDir(id: string): string {
    return join(this.o.dir, id);
  }

  /**
   * Mounts the container's buckets on the host and returns their bind mounts
   * (read-only ones read-only twice: s3fs `ro` and the bind). On a failure
   * the mounts made so far stay for unmount(id), which the start's undo runs.
   */
  async mount(
    id: string,
    buckets: readonly BucketMount[],
    cwd: string,
    user: { uid: number; gid: number } | undefined,
    readOnlyParents: readonly ReadOnlyParent[] = [],
  ): Promise<BindMount[]> {
    if (buckets.length === 0) return [];
    if (!existsSync("/dev/fuse"))
      throw new BerthError("failed_precondition", `cloud bucket ${buckets[0]!.name}: this agent has no /dev/fuse, so it cannot mount buckets`);
    const base = this.containerDir(id);
    mkdirSync(join(base, "mnt"), { recursive: true, mode: 0o700 });
    const out: BindMount[] = [];
    for (const b of buckets) {
      const dest = volumeDestination(b.mountPath, cwd);
      for (const p of readOnlyParents) {
        const rel = dest.startsWith(`${p.destination}/`) ? dest.slice(p.destination.length + 1) : undefined;
        if (rel !== undefined) mkdirSync(join(p.source, rel), { recursive: true, mode: 0o755 });
      }
      const mountpoint = join(base, "mnt", b.name);
      await this.mountOne(base, mountpoint, b, user);
      out.push({ source: mountpoint, destination: dest, readonly: b.readOnly === true });
    }
    return out;
  }

  private async mountOne(
    base: string,
    mountpoint: string,
    b: BucketMount,
    user: { uid: number; gid: number } | undefined,
  ): Promise<void> {
    mkdirSync(mountpoint, { recursive: true, mode: 0o755 });
    const endpoint = b.endpoint ?? DEFAULT_BUCKET_ENDPOINT;
    const opts = [`url=${endpoint}`, "allow_other", "sigv4", "mp_umask=0022", "umask=0022"];
    // S3-compatible services mostly serve buckets by path; AWS by host name.
    if (b.endpoint) opts.push("use_path_request_style");
    // s3fs's "endpoint" option is the SigV4 signing region.
    if (b.region) opts.push(`endpoint=${b.region}`);
    if (b.readOnly) opts.push("ro");
    if (user && user.uid !== 0) opts.push(`uid=${user.uid}`, `gid=${user.gid}`);
    let credsDir: string | undefined;
    if (b.accessKey && b.secretKey) {
      credsDir = mkdtempSync(join(this.o.dir, ".creds-"));
      const passwd = join(credsDir, "passwd");
      writeFileSync(passwd, `${b.accessKey}:${b.secretKey}\n`, { mode: 0o600 });
      opts.push(`passwd_file=${passwd}`);
    } else {
      opts.push("public_bucket=1");
    }
    // s3fs's own log file: it flushes each line there, where its stdout to a file is block-buffered.
    const logPath = join(base, `${b.name}.log`);
    writeFileSync(logPath, "", { mode: 0o600 });
    opts.push(`logfile=${logPath}`);
    const logFd = openSync(logPath, "a");
    let child: ChildProcess;
    try {
      child = spawn(this.s3fs, [b.name, mountpoint, "-f", "-o", opts.join(",")], {
        detached: true,
        stdio: ["ignore", logFd, logFd],
      });
    } finally {
      closeSync(logFd);
    }
    const spawned = new Promise<void>((resolve, reject) => {
      child.once("spawn", resolve);
      child.once("error", reject);
    });
    let exited = false;
    child.once("exit", () => {
      exited = true;
    });
    try {
      try {
        await spawned;
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        throw new BerthError(
          "failed_precondition",
          `cloud bucket ${b.name}: cannot run s3fs (${code === "ENOENT" ? "not installed: apt-get install s3fs" : code})`,
        );
      }
      child.unref();
      writeFileSync(join(base, `${b.name}.pid`), `${child.pid}\n`);
      const deadline = Date.now() + MOUNT_TIMEOUT_MS;
      while (!exited && !mountedPaths().has(mountpoint)) {
        if (Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 25));
      }
      // s3fs read the keys before it mounted.
      if (credsDir) rmSync(credsDir, { recursive: true, force: true });
      credsDir = undefined;
      // Whether s3fs answered FUSE_INIT (so finished its bucket check) before the deadline.
      let answered = false;
      if (!exited && mountedPaths().has(mountpoint)) {
        // Returns once s3fs has answered FUSE_INIT; an error answer (ENOTCONN) is an answer too.
        answered = await run("stat", ["-c", "%i", mountpoint], {
          timeout: Math.max(1000, deadline - Date.now()),
        }).then(
          () => true,
          (e: { killed?: boolean }) => e.killed !== true,
        );
      }
      const log = readFileSync(logPath, "utf8");
      if (exited || /result of checking service|Exiting FUSE/i.test(log)) throw mountFailure(b, endpoint, log, exited);
      if (!answered) {
        throw new BerthError(
          "unavailable",
          `cloud bucket ${b.name}: s3fs did not finish mounting from ${endpoint} within ${MOUNT_TIMEOUT_MS / 1000} s`,
          { bucket: b.name },
        );
      }
      if (!mountedPaths().has(mountpoint)) throw mountFailure(b, endpoint, log, exited);
      this.o.logger.info({ bucket: b.name, endpoint, readOnly: b.readOnly === true }, "cloud bucket mounted");
    } finally {
      if (credsDir) rmSync(credsDir, { recursive: true, force: true });
    }
  }

  /**
   * Unmounts and removes everything a container's buckets left on the host:
   * s3fs gets the unmount, time to flush and exit, then SIGKILL. Idempotent;
   * concurrent calls share one run.
   */
  unmount(id: string): Promise<void> {
    return this.unmounting.run(id, () => this.unmountNow(id));
  }

  private async unmountNow(id: string): Promise<void> {
    const base = this.containerDir(id);
    if (!existsSync(base)) return;
    const mntDir = join(base, "mnt");
    const names = existsSync(mntDir) ? readdirSync(mntDir) : [];
    for (const name of names) {
      const mountpoint = join(mntDir, name);
      if (mountedPaths().has(mountpoint)) {
        try {
          await run("umount", [mountpoint]);
        } catch {
          // Busy (a container still holds it): detach now, s3fs exits when the last user goes.
          await run("umount", ["-l", mountpoint]).catch((e) =>
            this.o.logger.error({ id, bucket: name, err: String(e) }, "unmounting a cloud bucket"),
          );
        }
      }
      await this.endS3fs(join(base, `${name}.pid`), mountpoint);
      // rmdir, never a recursive delete: were it still mounted, that would delete the bucket's objects.
      if (!mountedPaths().has(mountpoint)) rmdirSync(mountpoint);
    }
    if (names.every((n) => !existsSync(join(mntDir, n)))) rmSync(base, { recursive: true, force: true });
  }

  /** Waits for the s3fs of `mountpoint` (by its pid file, checked against /proc) to exit; SIGKILL after EXIT_WAIT_MS. */
  private async endS3fs(pidFile: string, mountpoint: string): Promise<void> {
    let pid: number;
    try {
      pid = Number.parseInt(readFileSync(pidFile, "utf8"), 10);
    } catch {
      return;
    }
    const alive = () => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").includes(mountpoint);
      } catch {
        return false;
      }
    };
    const deadline = Date.now() + EXIT_WAIT_MS;
    while (alive() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    if (alive()) {
      this.o.logger.warn({ pid, mountpoint }, "s3fs did not exit after its unmount; killing it");
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone meanwhile
      }
    }
  }

  /** A restarted agent: unmounts what containers no longer alive left behind. */
  async sweep(live: ReadonlySet<string>): Promise<void> {
    for (const name of readdirSync(this.o.dir)) {
      if (name.startsWith(".creds-")) {
        rmSync(join(this.o.dir, name), { recursive: true, force: true });
        continue;
      }
      if (!live.has(name)) await this.unmount(name);
    }
  }
}
