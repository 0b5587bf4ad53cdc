// Watches a serve session's code root for edits, with .berthignore's rules
// (sdk/python/berth/client/ignore.py: gitignore syntax plus the same defaults), so
// that what code sync leaves out (e.g. __pycache__ written by describe
// itself) never triggers a reload.

import { type FSWatcher, readFileSync, statSync, watch } from "node:fs";
import { relative, sep } from "node:path";
import ignore, { type Ignore } from "ignore";

/** sdk/python/berth/client/ignore.py DEFAULT_IGNORES, before the user's lines so `!venv/` can take one back. */
export const DEFAULT_IGNORES = [".git/", "__pycache__/", "*.pyc", ".venv/", "venv/"];
export const IGNORE_FILE = ".berthignore";

export function ignoreMatcher(root: string): Ignore {
  let lines: string[] = [];
  try {
    lines = readFileSync(`${root}/${IGNORE_FILE}`, "utf8").split(/\r?\n/);
  } catch {
    // No ignore file: the defaults alone.
  }
  return ignore().add([...DEFAULT_IGNORES, ...lines]);
}

function isDirOrGone(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return true;
  }
}

export interface TreeWatcher {
  close(): void;
}

/**
 * Calls onChange once edits under root have been quiet for debounceMs, with
 * the relative paths that changed. Node 20's recursive fs.watch follows
 * directories created later on Linux too.
 */
export function watchTree(
  root: string,
  onChange: (paths: string[]) => void,
  o: { debounceMs?: number; onError?: (e: Error) => void } = {},
): TreeWatcher {
  let matcher = ignoreMatcher(root);
  let pending = new Set<string>();
  let timer: NodeJS.Timeout | undefined;
  const watcher: FSWatcher = watch(root, { recursive: true }, (_event, filename) => {
    const rel = filename ? relative(".", String(filename)).split(sep).join("/") : "";
    if (rel === IGNORE_FILE) matcher = ignoreMatcher(root);
    if (rel && rel !== IGNORE_FILE) {
      if (matcher.ignores(rel)) return;
      if (isDirOrGone(`${root}/${rel}`) && matcher.ignores(`${rel}/`)) return;
    }
    pending.add(rel || ".");
    clearTimeout(timer);
    timer = setTimeout(() => {
      const paths = [...pending].sort();
      pending = new Set();
      onChange(paths);
    }, o.debounceMs ?? 300);
  });
  watcher.on("error", (e) => o.onError?.(e));
  return {
    close() {
      clearTimeout(timer);
      watcher.close();
    },
  };
}
