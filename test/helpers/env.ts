import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";

const inCI = () => process.env.CI === "true" || process.env.CI === "1";

function hasCommand(cmd: string): boolean {
  try {
    execFileSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/**
 * Checks a test's system requirements. Under CI=true a missing requirement
 * fails the test loudly; elsewhere the test is skipped with the reason.
 * Returns true when the test may go on.
 */
export function needs(t: TestContext, req: { root?: boolean; commands?: string[] }): boolean {
  const missing: string[] = [];
  if (req.root && process.getuid?.() !== 0) missing.push("root");
  for (const c of req.commands ?? []) if (!hasCommand(c)) missing.push(`command ${c}`);
  if (missing.length === 0) return true;
  return unavailable(t, `needs ${missing.join(", ")} (run scripts/ensure-deps.sh as root)`);
}

/** A requirement this machine lacks: fails the test under CI=true, skips it (saying why) elsewhere. */
export function unavailable(t: TestContext, why: string): false {
  if (inCI()) throw new Error(`requirement missing under CI: ${why}`);
  t.skip(why);
  return false;
}

/** A temporary directory removed when the test (or suite) ends, pass or fail. */
export function tempDir(t: { after: (fn: () => void) => void }, prefix = "berth-test-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}
