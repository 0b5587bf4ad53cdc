// FileInfo from an lstat, with owner and group names from the container's
// own /etc/passwd and /etc/group (never the host's).

import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from "node:fs";
import { posix } from "node:path";
import type { FileInfo } from "../../api/index.ts";
import { resolveInRoot } from "./resolve.ts";

/** /etc/passwd or /etc/group bigger than this is not read (names fall back to numbers). */
const MAX_ACCOUNT_FILE_BYTES = 1024 * 1024;

export interface AccountNames {
  users: Map<number, string>;
  groups: Map<number, string>;
}

function typeChar(st: Stats): string {
  if (st.isDirectory()) return "d";
  if (st.isSymbolicLink()) return "l";
  if (st.isCharacterDevice()) return "c";
  if (st.isBlockDevice()) return "b";
  if (st.isFIFO()) return "p";
  if (st.isSocket()) return "s";
  return "-";
}

/** `ls -l`'s mode column, setuid/setgid/sticky included. */
export function permissionString(st: Stats): string {
  const m = st.mode;
  const triple = (shift: number, special: boolean, specialChar: string) => {
    const r = m & (4 << shift) ? "r" : "-";
    const w = m & (2 << shift) ? "w" : "-";
    const xBit = (m & (1 << shift)) !== 0;
    const x = special ? (xBit ? specialChar : specialChar.toUpperCase()) : xBit ? "x" : "-";
    return r + w + x;
  };
  return (
    typeChar(st) +
    triple(6, (m & 0o4000) !== 0, "s") +
    triple(3, (m & 0o2000) !== 0, "s") +
    triple(0, (m & 0o1000) !== 0, "t")
  );
}

/** Reads a small regular file inside the container root (symlinks resolved inside it); "" when absent. */
function readSmallFile(root: string, containerPath: string): string {
  let fd: number | undefined;
  try {
    const r = resolveInRoot(root, containerPath, { followFinal: true });
    if (!r.stat?.isFile()) return "";
    fd = openSync(r.hostPath, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    const st = fstatSync(fd);
    if (!st.isFile() || st.size > MAX_ACCOUNT_FILE_BYTES) return "";
    const buf = Buffer.alloc(st.size);
    let off = 0;
    while (off < buf.length) {
      const n = readSync(fd, buf, off, buf.length - off, off);
      if (n === 0) break;
      off += n;
    }
    return buf.subarray(0, off).toString("utf8");
  } catch {
    return "";
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

function parseAccounts(text: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of text.split("\n")) {
    const [name, , id] = line.split(":");
    const n = Number(id);
    if (name && id !== undefined && id !== "" && Number.isInteger(n) && !out.has(n)) out.set(n, name);
  }
  return out;
}

export function readAccountNames(root: string): AccountNames {
  return {
    users: parseAccounts(readSmallFile(root, "/etc/passwd")),
    groups: parseAccounts(readSmallFile(root, "/etc/group")),
  };
}

export function fileInfo(
  containerPath: string,
  st: Stats,
  names: AccountNames,
  ids: { inside(id: number): number } = { inside: (id) => id },
): FileInfo {
  const uid = ids.inside(st.uid);
  const gid = ids.inside(st.gid);
  return {
    name: containerPath === "/" ? "" : posix.basename(containerPath),
    path: containerPath,
    size: st.size,
    isDir: st.isDirectory(),
    isSymlink: st.isSymbolicLink(),
    modTime: Math.floor(st.mtimeMs),
    mode: st.mode & 0o7777,
    permissions: permissionString(st),
    uid,
    gid,
    owner: names.users.get(uid) ?? String(uid),
    group: names.groups.get(gid) ?? String(gid),
  };
}
