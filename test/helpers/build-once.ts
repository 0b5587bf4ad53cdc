import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { sleep } from "../../shared/net.ts";

/**
 * Runs `build` once across every test process on this machine: the first to
 * take `lock` (a directory) builds; the others wait until `ready()` or until
 * the holder dies, then go on. A holder that died leaves a stale lock, which
 * is taken over.
 */
export async function buildOnce(
  lock: string,
  ready: () => boolean,
  build: () => Promise<void>,
  timeoutMs = 15 * 60_000,
): Promise<void> {
  if (ready()) return;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      mkdirSync(lock);
      writeFileSync(`${lock}/pid`, String(process.pid));
      break;
    } catch {
      if (ready()) return;
      if (holderIsDead(lock)) rmSync(lock, { recursive: true, force: true });
      else if (Date.now() > deadline) throw new Error(`timed out waiting for ${lock}`);
      else await sleep(500);
    }
  }
  try {
    if (!ready()) await build();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

function holderIsDead(lock: string): boolean {
  try {
    const pid = Number(readFileSync(`${lock}/pid`, "utf8"));
    if (!pid) return true;
    process.kill(pid, 0);
    return false;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ESRCH") return true;
    // No pid file yet: the holder may be between mkdir and write; only an old lock is stale.
    if (code === "ENOENT") {
      const st = statSync(lock, { throwIfNoEntry: false });
      return !st || Date.now() - st.mtimeMs > 10_000;
    }
    return false;
  }
}
