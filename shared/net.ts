import { createServer } from "node:net";

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
