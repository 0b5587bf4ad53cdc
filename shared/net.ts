import { createServer, connect as netConnect, type Socket } from "node:net";

/** A TCP port on loopback that was free a moment ago. */
export function freePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, host, () => {
      const addr = srv.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      srv.close(() => resolve(port));
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
  throw new Error(`timed out after ${opts.timeoutMs ?? 10_000} ms waiting for ${opts.what ?? "condition"}${why}`);
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
