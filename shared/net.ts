import { randomInt } from "node:crypto";
import { readFileSync } from "node:fs";
import { createServer, connect as netConnect, type Socket } from "node:net";

/**
 * A TCP port nothing listens on at `host`, picked below the kernel's
 * ephemeral range: between this check and the caller's own bind, an
 * outgoing connection could take a port of that range (it picks from it),
 * never one below it. Falls back to a port the kernel picks when the range
 * leaves no room below it.
 */
export async function freePort(host = "127.0.0.1"): Promise<number> {
  const top = ephemeralPortsFrom();
  const bottom = Math.max(1024, top - 16_384);
  for (let i = 0; bottom < top && i < 64; i++) {
    const port = randomInt(bottom, top);
    if ((await listenOnce(port, host)) !== undefined) return port;
  }
  return (await listenOnce(0, host)) as number;
}

/** The first port of the kernel's ephemeral range (Linux's default where it cannot be read). */
function ephemeralPortsFrom(): number {
  try {
    const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 0 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

/** Listens on `port` (0: the kernel picks) and closes; the port, or undefined when it was taken. */
function listenOnce(port: number, host: string): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", (e: NodeJS.ErrnoException) =>
      e.code === "EADDRINUSE" && port !== 0 ? resolve(undefined) : reject(e),
    );
    srv.listen(port, host, () => {
      const addr = srv.address();
      const got = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(got));
    });
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls `check` until it returns a truthy value or `timeoutMs` passes. */
export async function waitFor<T>(
  check: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  opts: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<T> {
  const deadline = Date.now() + (opts.timeoutMs ?? 10_000);
  let lastError: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await check();
      if (v) return v as T;
    } catch (e) {
      lastError = e;
    }
    await sleep(opts.intervalMs ?? 100);
  }
  const why = lastError instanceof Error ? `: ${lastError.message}` : "";
  throw new Error(
    `timed out after ${opts.timeoutMs ?? 10_000} ms waiting for ${opts.what ?? "condition"}${why}`,
  );
}

/**
 * One TCP connection attempt, bounded by the time left and an optional
 * signal: the socket, the connect error, or "timeout". Never rejects; a
 * socket that is not returned is destroyed.
 */
export function connectAttempt(
  host: string,
  port: number,
  leftMs: number,
  signal?: AbortSignal,
  o: { allowHalfOpen?: boolean } = {},
): Promise<Socket | Error | "timeout"> {
  if (leftMs <= 0) return Promise.resolve("timeout");
  return new Promise((resolve) => {
    const s = netConnect({ host, port, allowHalfOpen: o.allowHalfOpen ?? false });
    const done = (r: Socket | Error | "timeout") => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      s.off("connect", onConnect);
      s.off("error", onError);
      if (r !== s) s.destroy();
      resolve(r);
    };
    const onConnect = () => done(s);
    const onError = (e: Error) => done(e);
    const onAbort = () => done(new Error("aborted"));
    const timer = setTimeout(() => done("timeout"), leftMs);
    s.once("connect", onConnect);
    s.once("error", onError);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
