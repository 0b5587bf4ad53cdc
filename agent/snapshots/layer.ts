// A container's writes as one OCI layer: the overlay's upper dir, with its
// deletions turned into OCI whiteouts. Deletions are not read from overlayfs'
// own markers (0/0 character devices, and `trusted.overlay.opaque` xattrs that
// Node cannot read) but derived from what they do: a name that a lower dir
// has and the merged view lacks was deleted, and gets a `.wh.<name>` entry.
// That also covers opaque dirs (a dir removed and made again) without an
// opaque marker. GNU tar writes the archive (owners, modes, hard links,
// devices, long names, xattrs other than overlayfs' own).

import { execFile } from "node:child_process";
import { lstatSync, mkdirSync, readdirSync, readFileSync, type Stats, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { BerthError } from "../../shared/errors.ts";
import { type IdMap, idInside } from "../runtime/index.ts";

const execFileP = promisify(execFile);

export interface OverlayDirs {
  /** The mounted union, as the container's root sees it (without its other mounts). */
  merged: string;
  upper: string;
  /** Uppermost first. */
  lowers: string[];
}

const unescapeMountinfo = (s: string) =>
  s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8)));

/** The upper and lower dirs of the overlay mounted at `merged`, from mountinfo. */
export function overlayDirsOf(merged: string, mountinfo = "/proc/self/mountinfo"): OverlayDirs {
  let found: OverlayDirs | undefined;
  for (const line of readFileSync(mountinfo, "utf8").split("\n")) {
    const [pre, post] = line.split(" - ");
    if (!pre || !post) continue;
    if (unescapeMountinfo(pre.split(" ")[4] ?? "") !== merged) continue;
    const [fstype, , superOpts = ""] = post.split(" ");
    if (fstype !== "overlay") continue;
    const opts = new Map<string, string>();
    for (const kv of superOpts.split(",")) {
      const eq = kv.indexOf("=");
      if (eq > 0) opts.set(kv.slice(0, eq), unescapeMountinfo(kv.slice(eq + 1)));
    }
    const upper = opts.get("upperdir");
    const lower = opts.get("lowerdir");
    // The last mount at a point is the visible one.
    if (upper && lower) found = { merged, upper, lowers: lower.split(":") };
  }
  if (!found) throw new BerthError("internal", `no overlay with an upper dir is mounted at ${merged}`);
  return found;
}

const isWhiteout = (st: Stats) => st.isCharacterDevice() && st.rdev === 0;

function lstatOrUndefined(p: string): Stats | undefined {
  try {
    return lstatSync(p);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw e;
  }
}

/** The lower dirs that show through at a child dir: overlayfs stops at the first non-directory. */
function childLowers(lowers: string[], name: string): string[] {
  const out: string[] = [];
  for (const l of lowers) {
    const st = lstatOrUndefined(join(l, name));
    if (!st) continue;
    if (!st.isDirectory()) break;
    out.push(join(l, name));
  }
  return out;
}

export interface UpperEntries {
  /** Paths under upper ("./a/b"), parents before children, whiteout devices left out. */
  entries: string[];
  /** Whiteout files to add ("./a/.wh.b"). */
  whiteouts: string[];
}

/** Walks the upper dir; see the file comment for how deletions are found. */
export function upperEntries(o: OverlayDirs): UpperEntries {
  const out: UpperEntries = { entries: [], whiteouts: [] };
  const stack: { rel: string; lowers: string[] }[] = [{ rel: ".", lowers: o.lowers }];
  while (stack.length > 0) {
    const { rel, lowers } = stack.pop()!;
    const names = readdirSync(join(o.upper, rel)).sort();
    const inUpper = new Set(names);
    const sub: { rel: string; lowers: string[] }[] = [];
    for (const name of names) {
      const path = `${rel}/${name}`;
      const st = lstatSync(join(o.upper, path));
      if (isWhiteout(st)) continue;
      out.entries.push(path);
      if (st.isDirectory()) sub.push({ rel: path, lowers: childLowers(lowers, name) });
    }
    const hidden = new Set<string>();
    for (const l of lowers) {
      for (const name of readdirSync(l)) {
        if (hidden.has(name) || (inUpper.has(name) && !isWhiteout(lstatSync(join(o.upper, rel, name))))) {
          continue;
        }
        if (!lstatOrUndefined(join(o.merged, rel, name))) hidden.add(name);
      }
    }
    for (const name of [...hidden].sort()) out.whiteouts.push(`${rel}/.wh.${name}`);
    stack.push(...sub.reverse());
  }
  return out;
}

/**
 * Writes the upper dir of `o` as an uncompressed OCI layer tarball at `tarPath`;
 * `work` is an empty scratch dir (whiteout files and name lists go there).
 * The container should be paused meanwhile, so the layer is one moment's state.
 */
export async function writeUpperLayer(
  o: OverlayDirs,
  tarPath: string,
  work: string,
  idMap?: IdMap,
): Promise<UpperEntries> {
  const found = upperEntries(o);
  const marks = join(work, "whiteouts");
  mkdirSync(marks);
  for (const w of found.whiteouts) {
    const slash = w.lastIndexOf("/");
    mkdirSync(join(marks, w.slice(0, slash)), { recursive: true });
    writeFileSync(join(marks, w), "", { mode: 0o644 });
  }
  const upperList = join(work, "upper.list");
  const marksList = join(work, "whiteouts.list");
  writeFileSync(upperList, found.entries.map((e) => `${e}\0`).join(""));
  writeFileSync(marksList, found.whiteouts.map((e) => `${e}\0`).join(""));
  const args = [
    "--create",
    "--file",
    tarPath,
    "--numeric-owner",
    ...(idMap ? ownerMaps(o.upper, found.entries, idMap, work) : []),
    "--xattrs",
    "--xattrs-exclude=trusted.overlay.*",
    "--no-recursion",
    "--null",
    "--verbatim-files-from",
    "-C",
    o.upper,
    "-T",
    upperList,
    "-C",
    marks,
    "-T",
    marksList,
  ];
  try {
    await execFileP("tar", args, { maxBuffer: 16 * 1024 * 1024 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new BerthError(
      "internal",
      `writing the layer failed: tar: ${(err.stderr || err.message).trim().slice(-800)}`,
    );
  }
  return found;
}

/**
 * tar's --owner-map and --group-map that store the files of a container in
 * a user namespace as it sees them: host id `hostId + k` is k in the layer
 * (what it wrote as root is root's in the image, whichever range reads it
 * next). Only the ids present are listed.
 */
function ownerMaps(upper: string, entries: readonly string[], map: IdMap, work: string): string[] {
  const uids = new Set<number>();
  const gids = new Set<number>();
  for (const e of entries) {
    const st = lstatSync(join(upper, e));
    uids.add(st.uid);
    gids.add(st.gid);
  }
  const lines = (ids: Set<number>) =>
    [...ids]
      .map((id) => [id, idInside(map, id)] as const)
      .filter(([, inside]) => inside !== undefined)
      .map(([id, inside]) => `+${id} +${inside}\n`)
      .join("");
  const owners = join(work, "owner.map");
  const groups = join(work, "group.map");
  writeFileSync(owners, lines(uids));
  writeFileSync(groups, lines(gids));
  return [`--owner-map=${owners}`, `--group-map=${groups}`];
}
