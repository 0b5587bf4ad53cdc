// Polling for a condition in tests: bounded, and a timeout names what never came.

export interface WaitOptions {
  /** What the test waits for; the timeout's message names it. */
  what: string;
  /** @default 10_000 */
  timeoutMs?: number;
  /** @default 20 */
  intervalMs?: number;
  /** More to say when it times out (e.g. the output so far). */
  describe?: () => string;
}

/**
 * Calls `check` until it returns a truthy value, and returns that value.
 * An error `check` throws fails at once; past `timeoutMs` it fails with
 * "timed out after N ms waiting for <what>".
 */
export async function waitUntil<T>(
  check: () => T | undefined | null | false | Promise<T | undefined | null | false>,
  opts: WaitOptions,
): Promise<T> {
  const timeoutMs = opts.timeoutMs ?? 10_000;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) {
      const more = opts.describe?.() ?? "";
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${opts.what}${more ? `\n${more}` : ""}`);
    }
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 20));
  }
}
