// A sandbox's pid 1 as a process server (docs/sandboxes.md, "Process server").
// The coordinator labels a sandbox container whose pid 1 only keeps it alive
// (SANDBOX_INIT_LABEL); the agent, which can see the image's rootfs, then runs
// sdk/python/berth/runtime/sandbox_init.py as pid 1 when the image has python3, and
// keeps the requested keep-alive args otherwise. The server's socket lives in
// a directory of this container's own (`<root>/<id>/`), bind-mounted at
// /berth/init, owned by the container's user and closed to everyone else.

import {
  chownSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
} from "node:fs";
import type { Socket } from "node:net";
import { join, posix } from "node:path";
import { sleep } from "../../shared/net.ts";
import type { ContainerSpec } from "../runtime/index.ts";
import { connectInit } from "./init-exec.ts";

/** "1" on a container whose args may be replaced by the process server. */
export const SANDBOX_INIT_LABEL = "berth.sandbox_init";

export const SandboxInitPaths = {
  dir: "/berth/init",
  socket: "/berth/init/init.sock",
  sdk: "/berth/sdk",
  script: "/berth/sdk/berth/runtime/sandbox_init.py",
} as const;

const INIT_SOCKET_NAME = "init.sock";
const DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const MAX_LINKS = 40;

/**
 * `path` (absolute, as the container sees it) resolved inside `rootfs`:
 * symlinks are followed with absolute targets taken from the rootfs, never
 * from the host. The host path, or undefined when it does not resolve.
 */
export function resolveInRootfs(rootfs: string, path: string): string | undefined {
  const pending = path.split("/").filter((p) => p !== "" && p !== ".");
  const done: string[] = [];
  let links = 0;
  while (pending.length > 0) {
    const part = pending.shift() as string;
    if (part === "..") {
      done.pop();
      continue;
    }
    const host = join(rootfs, ...done, part);
    let isLink: boolean;
    try {
      isLink = lstatSync(host).isSymbolicLink();
    } catch {
      return undefined;
    }
    if (!isLink) {
      done.push(part);
      continue;
    }
    if (++links > MAX_LINKS) return undefined;
    const target = readlinkSync(host);
    if (target.startsWith("/")) done.length = 0;
    pending.unshift(...target.split("/").filter((p) => p !== "" && p !== "."));
  }
  return join(rootfs, ...done);
}

/** The path (in the container) of the first executable `name` on PATH, if any. */
export function findCommandInRootfs(rootfs: string, env: Record<string, string>, name: string) {
  for (const dir of (env.PATH ?? DEFAULT_PATH).split(":")) {
    if (!dir.startsWith("/")) continue;
    const inContainer = posix.join(dir, name);
    const host = resolveInRootfs(rootfs, inContainer);
    if (!host) continue;
    try {
      const st = statSync(host);
      if (st.isFile() && (st.mode & 0o111) !== 0) return inContainer;
    } catch {
      // not there
    }
  }
  return undefined;
}

/**
 * How long a new sandbox's first exec waits for its process server to
 * listen. The server (python3) listens some 30-60 ms after the container's
 * init runs; `runc exec` of the same process costs about as much again on
 * top of it, so a short wait is the faster path, and past it runc exec runs.
 */
export const FIRST_EXEC_WAIT_MS = 250;

/** The per-container socket directories of sandbox process servers. */
export class SandboxInits {
  /** Containers given a process server whose first exec has not come yet (this agent's starts only). */
  private readonly unused = new Set<string>();
  /**
   * Per container, a connection made after an exec through its server, for
   * the next exec: that one then finds the connect and the server's accept
   * done (one wake-up of the server fewer on the round trip). Not holding
   * the agent's event loop open; gone when the server closes it.
   */
  private readonly ahead = new Map<string, Promise<Socket | undefined>>();

  constructor(private readonly root: string) {
    mkdirSync(root, { recursive: true, mode: 0o700 });
  }

  /** Container `id`'s directory, mounted at /berth/init. */
  dirOf(id: string): string {
    return join(this.root, id);
  }

  /**
   * A pre-warmed sandbox's directory (mounted in it already, its server
   * listening) given to the id it now has: renaming keeps the mount. Its
   * first exec does not wait (the pool gave it only once it listened).
   */
  adopt(fromId: string, toId: string): void {
    this.unused.delete(fromId);
    renameSync(join(this.root, fromId), join(this.root, toId));
  }

  /** Where the agent connects to run a process in container `id`. */
  socketOf(id: string): string {
    return join(this.root, id, INIT_SOCKET_NAME);
  }

  /**
   * For a container labelled for it whose image has python3: the process
   * server becomes pid 1 (spec changed in place) and its directory is made.
   * False when the spec is left as it was.
   */
  prepare(spec: ContainerSpec, sdkDir: string): boolean {
    if (spec.labels?.[SANDBOX_INIT_LABEL] !== "1") return false;
    // Under gVisor the agent cannot reach a socket bound inside (even with runsc --host-uds=all the
    // server never started a process for it): processes start with `runsc exec`, pid 1 stays the keep-alive.
    if (spec.runtime === "runsc") return false;
    // An overlay stack (uppermost first) is searched layer by layer: enough to find a python3.
    const layers = Array.isArray(spec.image.rootfs) ? spec.image.rootfs : [spec.image.rootfs];
    const python = layers.map((l) => findCommandInRootfs(l, spec.env ?? {}, "python3")).find(Boolean);
    if (!python) return false;
    const dir = join(this.root, spec.id);
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir, { mode: 0o700 });
    const user = spec.user ?? { uid: 0, gid: 0 };
    chownSync(dir, user.uid, user.gid);
    spec.args = [python, "-u", "-I", SandboxInitPaths.script, SandboxInitPaths.socket];
    spec.mounts = [
      ...(spec.mounts ?? []),
      { source: dir, destination: SandboxInitPaths.dir, readonly: false, idmapped: true },
      { source: sdkDir, destination: SandboxInitPaths.sdk, readonly: true },
    ];
    this.unused.add(spec.id);
    return true;
  }

  /**
   * Before container `id`'s first exec: waits up to `ms` for its process
   * server's socket (renamed into place once it listens). At once for any
   * later exec, and for a container without one.
   */
  async listening(id: string, ms = FIRST_EXEC_WAIT_MS): Promise<void> {
    if (!this.unused.delete(id)) return;
    const socket = this.socketOf(id);
    const until = Date.now() + ms;
    while (!existsSync(socket) && Date.now() < until) await sleep(3);
  }

  /** The connection made ahead to container `id`'s server, while it is open (taken: the next exec makes its own). */
  async takeAhead(id: string): Promise<Socket | undefined> {
    const made = this.ahead.get(id);
    this.ahead.delete(id);
    const sock = made ? await made : undefined;
    if (sock && !sock.destroyed && sock.readyState === "open") {
      sock.removeAllListeners("end");
      sock.removeAllListeners("error");
      sock.ref();
      return sock;
    }
    sock?.destroy();
    return undefined;
  }

  /** After an exec through container `id`'s server: a connection for its next one (one at most). */
  connectAhead(id: string): void {
    if (this.ahead.has(id)) return;
    const made = connectInit(this.socketOf(id)).then((sock) => {
      if (!sock) {
        if (this.ahead.get(id) === made) this.ahead.delete(id);
        return undefined;
      }
      sock.unref();
      sock.on("error", () => {});
      // The server went away (the container stops): this one is no use.
      sock.once("end", () => {
        if (this.ahead.get(id) === made) this.ahead.delete(id);
        sock.destroy();
      });
      return sock;
    });
    this.ahead.set(id, made);
  }

  close(id: string): void {
    const made = this.ahead.get(id);
    this.ahead.delete(id);
    void made?.then((sock) => sock?.destroy());
    this.unused.delete(id);
    rmSync(join(this.root, id), { recursive: true, force: true });
  }
}
