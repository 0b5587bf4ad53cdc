// Files inside a container's root, the sandbox half of the agent's API with
// snapshots.ts. Like ContainerApi, the local implementation (agent/host) and
// the gRPC client (api/grpc) implement this same interface (docs/sandboxes.md).
//
// Paths are the container's own: absolute ("/app/x.txt") or relative to "/".
// They resolve inside the container's root filesystem as the container sees
// it, symlinks included, and never reach outside it: a link to "/" or ".."
// stops at the container's root. Errors: path_not_found (NotFound) and
// path_invalid (InvalidArgument) name the path in their message and in
// details.path; an unknown container is not_found.

export interface FileInfo {
  /** Base name ("" for the root). */
  name: string;
  /** The container path, normalised. */
  path: string;
  size: number;
  isDir: boolean;
  isSymlink: boolean;
  /** ms since epoch */
  modTime: number;
  /** Permission bits (mode & 0o7777). */
  mode: number;
  /** `ls -l` form, e.g. "-rw-r--r--", "drwxr-xr-x". */
  permissions: string;
  uid: number;
  gid: number;
  /** Names from the container's own /etc/passwd and /etc/group; the number as text when absent. */
  owner: string;
  group: string;
}

/** 1-based line and column (in characters). */
export interface FilePosition {
  line: number;
  column: number;
}

export interface FileSearchMatch {
  path: string;
  /** The matched text's line, without its newline. */
  line: string;
  range: { start: FilePosition; end: FilePosition };
}

export interface ReplaceResult {
  path: string;
  replacements: number;
}

export interface ContainerFilesApi {
  statPath(containerId: string, path: string): Promise<FileInfo>;
  /** A directory's entries (not recursive), sorted by name. */
  listDir(containerId: string, path: string): Promise<FileInfo[]>;
  /** A regular file's bytes, streamed. */
  readFile(containerId: string, path: string, opts?: { signal?: AbortSignal }): AsyncIterable<Uint8Array>;
  /**
   * Writes a regular file from a stream: to a temporary name in the same
   * directory, renamed over the path once complete, so a failed upload leaves
   * nothing behind. Parent directories are created. @default mode 0o644
   */
  writeFile(containerId: string, path: string, data: AsyncIterable<Uint8Array>, opts?: { mode?: number }): Promise<FileInfo>;
  /** A file or symlink (never a directory: path_invalid). */
  deleteFile(containerId: string, path: string): Promise<void>;
  /** mkdir -p. */
  createDirectory(containerId: string, path: string): Promise<FileInfo>;
  /** rm -r of a directory (never "/": path_invalid). */
  deleteDirectory(containerId: string, path: string): Promise<void>;
  /**
   * Lines matching a pattern (a JavaScript regular expression; a pattern that
   * does not compile is path_invalid's sibling invalid_request) in a file or,
   * recursively, in the files under a directory. Binary files (a NUL in the
   * first 8 KiB) and files over 16 MiB are skipped; at most 1000 matches.
   */
  findInFiles(containerId: string, path: string, pattern: string): Promise<FileSearchMatch[]>;
  /** Replaces every occurrence of a literal string in a file or the files under a directory. */
  replaceInFiles(containerId: string, path: string, oldString: string, newString: string): Promise<ReplaceResult[]>;
}
