// Creating the agent's local socket safely. Whoever can connect to it
// commands the host, so it must never be reachable by anyone but its owner,
// not even for the moment between bind() and chmod(): it is bound inside a
// fresh 0700 directory, set to 0600 there, then renamed into place.

import { chmod, lstat, mkdir, mkdtemp, rename, rmdir, unlink } from "node:fs/promises";
import { connect } from "node:net";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { BerthError } from "../../shared/errors.ts";

// sun_path holds 108 bytes including the terminating NUL.
const MAX_SOCKET_PATH = 107;
const TEMP_PREFIX = ".berth-rpc-";
// mkdtemp appends 6 characters; "/s" names the socket inside.
const TEMP_EXTRA = 1 + TEMP_PREFIX.length + 6 + 2;

export function resolveUnixSocketPath(path: string): string {
  if (typeof path !== "string" || !isAbsolute(path)) {
    throw new BerthError(
      "invalid_request",
      `agent rpc: unixSocket must be an absolute path, got ${String(path)}`,
    );
  }
  const p = resolve(path);
  const longest = Math.max(Buffer.byteLength(p), Buffer.byteLength(dirname(p)) + TEMP_EXTRA);
  if (longest > MAX_SOCKET_PATH) {
    throw new BerthError(
      "invalid_request",
      `agent rpc: unix socket path ${p} is too long (unix sockets allow ${MAX_SOCKET_PATH} bytes, ` +
        `and a temporary sibling needs ${TEMP_EXTRA - 1} more than the directory)`,
    );
  }
  return p;
}

/** True when something accepts connections on the socket at `path`. */
function socketIsLive(path: string): Promise<boolean> {
  return new Promise((done) => {
    const s = connect({ path });
    const timer = setTimeout(() => {
      s.destroy();
      done(true); // a listener too busy to accept is still a listener
    }, 1000);
    s.once("connect", () => {
      clearTimeout(timer);
      s.destroy();
      done(true);
    });
    s.once("error", () => {
      clearTimeout(timer);
      done(false);
    });
  });
}

async function removeStaleSocket(path: string): Promise<void> {
  const st = await lstat(path).catch((e: NodeJS.ErrnoException) => {
    if (e.code === "ENOENT") return undefined;
    throw e;
  });
  if (!st) return;
  if (!st.isSocket()) {
    throw new BerthError(
      "failed_precondition",
      `agent rpc: ${path} exists and is not a socket; not replacing it`,
    );
  }
  if (await socketIsLive(path)) {
    throw new BerthError("conflict", `agent rpc: another process is already serving on ${path}`);
  }
  await unlink(path).catch((e: NodeJS.ErrnoException) => {
    if (e.code !== "ENOENT") throw e;
  });
}

export interface BoundUnixSocket {
  /** Removes the socket file if it is still the one this process created. */
  remove(): Promise<void>;
}

/**
 * Binds a server at `path` through `bind(address)` (given a `unix://` address)
 * with mode 0600, replacing a stale socket left by a crashed process.
 */
export async function bindUnixSocket(
  path: string,
  bind: (address: string) => Promise<unknown>,
): Promise<BoundUnixSocket> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  await removeStaleSocket(path);
  const tempDir = await mkdtemp(join(dir, TEMP_PREFIX));
  const tempPath = join(tempDir, "s");
  try {
    try {
      await bind(`unix://${tempPath}`);
    } catch (e) {
      throw new BerthError("unavailable", `agent rpc: cannot listen on ${path}: ${(e as Error).message}`);
    }
    await chmod(tempPath, 0o600);
    await rename(tempPath, path);
  } finally {
    await unlink(tempPath).catch(() => {});
    await rmdir(tempDir).catch(() => {});
  }
  const { ino } = await lstat(path);
  return {
    async remove() {
      const st = await lstat(path).catch(() => undefined);
      if (st?.isSocket() && st.ino === ino) await unlink(path).catch(() => {});
    },
  };
}
