// fromProto/toProto for the sandbox messages of agent.proto (files and
// snapshots). Replies decoded on the client are the agent's to get right: a
// malformed one is internal, not the caller's fault.

import { BerthError } from "../../shared/errors.ts";
import type { FileInfo, FilePosition, FileSearchMatch, ReplaceResult } from "../files.ts";

export interface WireFileInfo {
  name: string;
  path: string;
  size: number;
  isDir: boolean;
  isSymlink: boolean;
  modTime: number;
  mode: number;
  permissions: string;
  uid: number;
  gid: number;
  owner: string;
  group: string;
}

export interface WireFileSearchMatch {
  path: string;
  line: string;
  start: FilePosition | null;
  end: FilePosition | null;
}

export function fileInfoToProto(f: FileInfo): WireFileInfo {
  return { ...f };
}

export function fileInfoFromProto(w: WireFileInfo): FileInfo {
  return {
    name: w.name,
    path: w.path,
    size: w.size,
    isDir: w.isDir,
    isSymlink: w.isSymlink,
    modTime: w.modTime,
    mode: w.mode,
    permissions: w.permissions,
    uid: w.uid,
    gid: w.gid,
    owner: w.owner,
    group: w.group,
  };
}

export function matchToProto(m: FileSearchMatch): WireFileSearchMatch {
  return { path: m.path, line: m.line, start: m.range.start, end: m.range.end };
}

export function matchFromProto(w: WireFileSearchMatch): FileSearchMatch {
  if (!w.start || !w.end)
    throw new BerthError("internal", `agent sent a match in ${w.path} without its range`);
  return {
    path: w.path,
    line: w.line,
    range: {
      start: { line: w.start.line, column: w.start.column },
      end: { line: w.end.line, column: w.end.column },
    },
  };
}

export function replaceResultFromProto(w: ReplaceResult): ReplaceResult {
  return { path: w.path, replacements: w.replacements };
}
