// find (a regular expression per line) and replace (a literal string) over a
// file or a directory tree inside a container root. The walk never follows
// symlinks and skips the kernel's pseudo file systems; binary files (a NUL
// in the first 8 KiB) and files over 16 MiB are left alone.

import { randomBytes } from "node:crypto";
import {
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readSync,
  renameSync,
  rmSync,
  type Stats,
  writeSync,
} from "node:fs";
import { dirname, join, posix } from "node:path";
import type { FileSearchMatch, ReplaceResult } from "../../api/index.ts";
import { pathNotFound, resolveInRoot } from "./resolve.ts";

export const MAX_SEARCH_FILE_BYTES = 16 * 1024 * 1024;
export const MAX_MATCHES = 1000;
const BINARY_SNIFF_BYTES = 8 * 1024;
/** Not walked into from above: the kernel's views, not files anyone wrote. */
const PSEUDO_DIRS = new Set(["/proc", "/sys", "/dev"]);

interface TreeFile {
  containerPath: string;
  hostPath: string;
}

/**
 * Regular files at or under `path` (the named path's own symlinks followed),
 * in name order, named below `shownAs` (the path as the caller wrote it, normalised).
 */
function* walk(root: string, path: string, shownAs: string): Generator<TreeFile> {
  const r = resolveInRoot(root, path, { followFinal: true });
  if (!r.stat) throw pathNotFound(shownAs);
  if (r.stat.isFile()) {
    yield { containerPath: shownAs, hostPath: r.hostPath };
    return;
  }
  if (!r.stat.isDirectory()) return;
  const stack: TreeFile[] = [{ containerPath: shownAs, hostPath: r.hostPath }];
  while (stack.length > 0) {
    const dir = stack.pop()!;
    let names: string[];
    try {
      names = readdirSync(dir.hostPath).sort();
    } catch {
      continue; // unreadable or removed meanwhile
    }
    const subdirs: TreeFile[] = [];
    for (const name of names) {
      const entry = {
        containerPath: posix.join(dir.containerPath, name),
        hostPath: join(dir.hostPath, name),
      };
      let st: Stats;
      try {
        st = lstatSync(entry.hostPath);
      } catch {
        continue;
      }
      if (st.isDirectory() && !PSEUDO_DIRS.has(entry.containerPath)) subdirs.push(entry);
      else if (st.isFile()) yield entry;
    }
    stack.push(...subdirs.reverse());
  }
}

/** The file's bytes when it is a regular text file within the size limit; undefined otherwise. */
function readText(hostPath: string): { text: string; bytes: Buffer; stat: Stats } | undefined {
  let fd: number;
  try {
    fd = openSync(hostPath, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return undefined;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile() || stat.size > MAX_SEARCH_FILE_BYTES) return undefined;
    const buf = Buffer.alloc(stat.size);
    let off = 0;
    while (off < buf.length) {
      const n = readSync(fd, buf, off, buf.length - off, off);
      if (n === 0) break;
      off += n;
    }
    const bytes = buf.subarray(0, off);
    if (bytes.subarray(0, BINARY_SNIFF_BYTES).includes(0)) return undefined;
    return { text: bytes.toString("utf8"), bytes, stat };
  } finally {
    closeSync(fd);
  }
}

const codePoints = (s: string) => {
  let n = 0;
  for (const _ of s) n++;
  return n;
};

export function findInTree(root: string, path: string, shownAs: string, pattern: RegExp): FileSearchMatch[] {
  const re = new RegExp(pattern.source, pattern.flags.includes("g") ? pattern.flags : `${pattern.flags}g`);
  const out: FileSearchMatch[] = [];
  for (const f of walk(root, path, shownAs)) {
    const file = readText(f.hostPath);
    if (!file) continue;
    const lines = file.text.split("\n");
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i]!;
      if (i === lines.length - 1 && line === "") break;
      re.lastIndex = 0;
      for (let m = re.exec(line); m; m = re.exec(line)) {
        const startCol = codePoints(line.slice(0, m.index)) + 1;
        out.push({
          path: f.containerPath,
          line,
          range: {
            start: { line: i + 1, column: startCol },
            end: { line: i + 1, column: startCol + codePoints(m[0]) },
          },
        });
        if (out.length >= MAX_MATCHES) return out;
        if (m[0] === "") re.lastIndex++;
      }
    }
  }
  return out;
}

/** Writes `text` over `hostPath` through a temp file beside it, keeping mode and owner. */
function rewrite(hostPath: string, text: string, stat: Stats): void {
  const tmp = join(dirname(hostPath), `.berth-replace-${randomBytes(6).toString("hex")}`);
  const fd = openSync(
    tmp,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
    0o600,
  );
  try {
    const buf = Buffer.from(text, "utf8");
    let off = 0;
    while (off < buf.length) off += writeSync(fd, buf, off, buf.length - off);
    fchownSync(fd, stat.uid, stat.gid);
    fchmodSync(fd, stat.mode & 0o7777);
    closeSync(fd);
    renameSync(tmp, hostPath);
  } catch (e) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
    rmSync(tmp, { force: true });
    throw e;
  }
}

export function replaceInTree(
  root: string,
  path: string,
  shownAs: string,
  oldString: string,
  newString: string,
): ReplaceResult[] {
  const out: ReplaceResult[] = [];
  for (const f of walk(root, path, shownAs)) {
    const file = readText(f.hostPath);
    if (!file) continue;
    const parts = file.text.split(oldString);
    if (parts.length < 2) continue;
    // Not valid UTF-8: rewriting the decoded text would change other bytes too.
    if (!Buffer.from(file.text, "utf8").equals(file.bytes)) continue;
    rewrite(f.hostPath, parts.join(newString), file.stat);
    out.push({ path: f.containerPath, replacements: parts.length - 1 });
  }
  return out;
}
