// One container's files for the fake agent (test/helpers/fake-container-api.ts):
// a map of normalised path → entry, "/" always there, with the errors the
// real host gives (path_not_found, path_invalid; docs/sandboxes.md).

import { posix } from "node:path";
import type { FileInfo, FileSearchMatch, ReplaceResult } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";

interface FsEntry {
  dir: boolean;
  data: Buffer;
  mode: number;
  modTime: number;
}

export class FakeFileTree {
  private readonly t: Map<string, FsEntry>;

  constructor(private readonly now: () => number) {
    this.t = new Map([["/", this.dirEntry()]]);
  }

  stat(path: string): FileInfo {
    return info(...this.entry(path));
  }

  list(path: string): FileInfo[] {
    const [p, e] = this.entry(path);
    if (!e.dir) throw new BerthError("path_invalid", `${p} is not a directory`, { path: p });
    return [...this.t]
      .filter(([q]) => q !== "/" && posix.dirname(q) === p)
      .sort(([a], [b]) => (a < b ? -1 : 1))
      .map(([q, f]) => info(q, f));
  }

  /** The file's bytes in chunks: a 1-byte first chunk, then 64 KiB ones, as a stream would split them. */
  *read(path: string): Iterable<Uint8Array> {
    const [p, e] = this.entry(path);
    if (e.dir) throw new BerthError("path_invalid", `${p} is a directory`, { path: p });
    if (e.data.length > 0) yield e.data.subarray(0, 1);
    for (let at = 1; at < e.data.length; at += 64 * 1024) yield e.data.subarray(at, at + 64 * 1024);
  }

  /** Refuses a write over a directory before any byte is read. */
  checkWritable(path: string): void {
    const p = norm(path);
    if (this.t.get(p)?.dir) throw new BerthError("path_invalid", `${p} is a directory`, { path: p });
  }

  write(path: string, data: Buffer, mode = 0o644): FileInfo {
    const p = norm(path);
    this.checkWritable(p);
    this.mkdirs(posix.dirname(p));
    const e = { dir: false, data, mode, modTime: this.now() };
    this.t.set(p, e);
    return info(p, e);
  }

  deleteFile(path: string): void {
    const [p, e] = this.entry(path);
    if (e.dir) throw new BerthError("path_invalid", `${p} is a directory`, { path: p });
    this.t.delete(p);
  }

  mkdir(path: string): FileInfo {
    const p = norm(path);
    this.mkdirs(p);
    return this.stat(p);
  }

  rmdir(path: string): void {
    const p = norm(path);
    if (p === "/") throw new BerthError("path_invalid", "cannot delete the root directory /", { path: p });
    const [, e] = this.entry(p);
    if (!e.dir) throw new BerthError("path_invalid", `${p} is not a directory`, { path: p });
    for (const q of [...this.t.keys()]) if (q === p || q.startsWith(`${p}/`)) this.t.delete(q);
  }

  find(path: string, pattern: string): FileSearchMatch[] {
    let re: RegExp;
    try {
      re = new RegExp(pattern);
    } catch (e) {
      throw new BerthError("invalid_request", `pattern ${pattern} does not compile: ${(e as Error).message}`);
    }
    const [p] = this.entry(path);
    const out: FileSearchMatch[] = [];
    for (const [q, f] of this.filesUnder(p)) {
      f.data
        .toString("utf8")
        .split("\n")
        .forEach((line, i) => {
          const m = re.exec(line);
          if (!m) return;
          out.push({
            path: q,
            line,
            range: {
              start: { line: i + 1, column: m.index + 1 },
              end: { line: i + 1, column: m.index + 1 + m[0].length },
            },
          });
        });
    }
    return out;
  }

  replace(path: string, oldString: string, newString: string): ReplaceResult[] {
    const [p] = this.entry(path);
    const out: ReplaceResult[] = [];
    for (const [q, f] of this.filesUnder(p)) {
      const parts = f.data.toString("utf8").split(oldString);
      if (parts.length < 2) continue;
      f.data = Buffer.from(parts.join(newString));
      out.push({ path: q, replacements: parts.length - 1 });
    }
    return out;
  }

  private dirEntry(): FsEntry {
    return { dir: true, data: Buffer.alloc(0), mode: 0o755, modTime: this.now() };
  }

  private entry(path: string): [string, FsEntry] {
    const p = norm(path);
    const e = this.t.get(p);
    if (!e) throw new BerthError("path_not_found", `no file or directory at ${p}`, { path: p });
    return [p, e];
  }

  private mkdirs(dir: string): void {
    for (let d = dir; !this.t.has(d); d = posix.dirname(d)) this.t.set(d, this.dirEntry());
    if (!this.t.get(dir)?.dir)
      throw new BerthError("path_invalid", `${dir} is not a directory`, { path: dir });
  }

  private filesUnder(root: string): [string, FsEntry][] {
    const prefix = root === "/" ? "/" : `${root}/`;
    return [...this.t]
      .filter(([p, e]) => !e.dir && (p === root || p.startsWith(prefix)))
      .sort(([a], [b]) => (a < b ? -1 : 1));
  }
}

function norm(path: string): string {
  const p = posix.normalize(`/${path}`);
  return p.length > 1 ? p.replace(/\/+$/, "") : "/";
}

function info(path: string, e: FsEntry): FileInfo {
  const bits = (m: number) => `${m & 4 ? "r" : "-"}${m & 2 ? "w" : "-"}${m & 1 ? "x" : "-"}`;
  return {
    name: path === "/" ? "" : posix.basename(path),
    path,
    size: e.dir ? 4096 : e.data.length,
    isDir: e.dir,
    isSymlink: false,
    modTime: e.modTime,
    mode: e.mode,
    permissions: `${e.dir ? "d" : "-"}${bits(e.mode >> 6)}${bits(e.mode >> 3)}${bits(e.mode)}`,
    uid: 0,
    gid: 0,
    owner: "root",
    group: "root",
  };
}
