// Watches a serve session's code root for edits, with .berthignore's rules
// (sdk/python/berth/client/ignore.py: gitignore syntax plus the same defaults), so
// that what code sync leaves out (e.g. __pycache__ written by describe
// itself) never triggers a reload. Files a program writes while it runs —
// logs, common output folders, and the file this process's own output is
// redirected to — never trigger one either: a reload would write more of
// them, and the session would reload in a loop.

import { type FSWatcher, fstatSync, readFileSync, statSync, watch } from "node:fs";
import { relative, sep } from "node:path";
import ignore, { type Ignore } from "ignore";

/**
 * sdk/python/berth/client/ignore.py DEFAULT_IGNORES (test/cli/watch.test.ts checks they agree),
 * before the user's lines so `!venv/` can take one back.
 */
export const DEFAULT_IGNORES = [
  ".git/",
  ".hg/",
  ".svn/",
  "__pycache__/",
  "*.pyc",
  "*.pyo",
  ".venv/",
  "venv/",
  ".tox/",
  ".nox/",
  ".mypy_cache/",
  ".pytest_cache/",
  ".ruff_cache/",
  ".ipynb_checkpoints/",
  "node_modules/",
  "dist/",
  "build/",
  "*.egg-info/",
  ".DS_Store",
];
export const IGNORE_FILE = ".berthignore";
/**
 * What programs write as they run: not watched (still synced), so a program
 * whose output lands beside its code does not reload itself. A `!outputs/`
 * line in .berthignore watches one of them again.
 */
export const WATCH_IGNORES = [
  "*.log",
  "log/",
  "logs/",
  "out/",
  "output/",
  "outputs/",
  "tmp/",
  "checkpoints/",
  "wandb/",
  "mlruns/",
  "lightning_logs/",
];

/** The sync's rules (.berthignore and its defaults); with `watch`, the watch-only ones too. */
export function ignoreMatcher(root: string, o: { watch?: boolean } = {}): Ignore {
  let lines: string[] = [];
  try {
    lines = readFileSync(`${root}/${IGNORE_FILE}`, "utf8").split(/\r?\n/);
  } catch {
    // No ignore file: the defaults alone.
  }
  return ignore().add([...DEFAULT_IGNORES, ...(o.watch ? WATCH_IGNORES : []), ...lines]);
}

/** The files this process's stdout and stderr are redirected to (`berth serve app.py:f > serve.log`). */
export function ownOutputFiles(): { dev: number; ino: number }[] {
  const out: { dev: number; ino: number }[] = [];
  for (const fd of [1, 2]) {
    try {
      const st = fstatSync(fd);
      if (st.isFile()) out.push({ dev: st.dev, ino: st.ino });
    } catch {
      // Closed: nothing written there.
    }
  }
  return out;
}

function isOneOf(path: string, files: { dev: number; ino: number }[]): boolean {
  if (files.length === 0) return false;
  try {
    const st = statSync(path);
    return files.some((f) => f.dev === st.dev && f.ino === st.ino);
  } catch {
    return false;
  }
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
  o: {
    debounceMs?: number;
    onError?: (e: Error) => void;
    /** Files never to react to (by device and inode). @default this process's redirected stdout and stderr */
    ownFiles?: { dev: number; ino: number }[];
  } = {},
): TreeWatcher {
  let matcher = ignoreMatcher(root, { watch: true });
  const own = o.ownFiles ?? ownOutputFiles();
  let pending = new Set<string>();
  let timer: NodeJS.Timeout | undefined;
  const watcher: FSWatcher = watch(root, { recursive: true }, (_event, filename) => {
    const rel = filename ? relative(".", String(filename)).split(sep).join("/") : "";
    if (rel === IGNORE_FILE) matcher = ignoreMatcher(root, { watch: true });
    if (rel && rel !== IGNORE_FILE) {
      if (matcher.ignores(rel)) return;
      if (isDirOrGone(`${root}/${rel}`) && matcher.ignores(`${rel}/`)) return;
      if (isOneOf(`${root}/${rel}`, own)) return;
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
