// One image layer unpacked into a directory of its own, in the form overlayfs
// reads as a lower dir (the model of containerd's overlayfs snapshotter): the
// layer's blob (compressed or not) is read once as a stream, hashed on the
// way, and piped into GNU tar; OCI whiteouts become overlay whiteouts after.
//
// - `.wh.NAME` (NAME deleted by this layer) becomes a 0/0 character device
//   NAME, which overlayfs reads as "deleted here".
// - `.wh..wh..opq` (the directory hides everything below it) becomes the
//   xattr trusted.overlay.opaque=y on that directory.
// - trusted.overlay.* xattrs in the archive itself are not restored: only the
//   conversion above may tell overlayfs what is deleted.
//
// Node has neither mknod(2) nor setxattr(2), so one python3 process converts
// every whiteout of a layer (most layers have none, and spawn nothing).
// Both need root; a store not run as root refuses a layer with whiteouts.

import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { BerthError } from "../../shared/errors.ts";
import type { OciDescriptor } from "./oci-layout.ts";

export interface LayerUnpackTools {
  tar: string;
  python: string;
  rootless: boolean;
}

export interface LayerUnpackOptions {
  /** Also write the blob's bytes to this file as they pass (the OCI layout keeps the blob). */
  teePath?: string;
  /** Bytes of the blob read so far, after each chunk. */
  onBytes?: (n: number) => void;
  signal?: AbortSignal;
}

/** The command that decompresses a layer's blob, from its media type; throws for a layer kind berth cannot unpack. */
export function decompressor(layer: OciDescriptor): string {
  const t = layer.mediaType;
  if (/(\+|\.)gzip$/.test(t)) return "gzip -dc";
  if (/(\+|\.)zstd$/.test(t)) return "zstd -dcq";
  if (/\.tar$/.test(t) || t === "application/vnd.docker.image.rootfs.diff.tar") return "cat";
  throw new BerthError(
    "invalid_request",
    `layer ${layer.digest} has media type ${t}, which berth cannot unpack`,
    {
      digest: layer.digest,
      mediaType: t,
    },
  );
}

// The blob flows through processes of its own, as `curl | tar -xz` would:
// tee (the blob's file), the decompressor, and tar, so a host unpacks as many
// layers at once as it has cores while this process only hashes and copies.
// Layers some Go tools write (umoci's among them) end without the padding of
// their last file or the end-of-archive blocks; GNU tar needs both, so zeros
// follow the archive (tar stops at its end marker and ignores the rest).
const PIPELINE = `
set -o pipefail
tar_bin=$1 dest=$2 blob=$3 decompress=$4
shift 4
if [ -n "$blob" ]; then src() { tee -- "$blob"; }; else src() { cat; }; fi
src | { $decompress || exit $?; head -c 10240 /dev/zero 2>/dev/null || true; } | "$tar_bin" --extract --file=- --directory "$dest" "$@"
`;

/**
 * Unpacks the blob `layer` from `source` into `dest` (an empty directory) and
 * checks the blob's sha256 against `layer.digest`. On any failure (the digest
 * check included) it throws; the caller removes `dest` (and the tee file),
 * which is why both are temp paths renamed into place only after this resolves.
 */
export async function unpackLayer(
  tools: LayerUnpackTools,
  source: AsyncIterable<Uint8Array>,
  layer: OciDescriptor,
  dest: string,
  opts: LayerUnpackOptions = {},
): Promise<{ bytes: number }> {
  const owners = tools.rootless
    ? ["--no-same-owner", "--no-same-permissions"]
    : ["--numeric-owner", "--same-owner", "--same-permissions", "--xattrs", "--xattrs-include=*"];
  const tarArgs = ["--verbose", "--quoting-style=escape", ...owners, "--xattrs-exclude=trusted.overlay.*"];
  const args = [
    "-c",
    PIPELINE,
    "berth-unpack",
    tools.tar,
    dest,
    opts.teePath ?? "",
    decompressor(layer),
    ...tarArgs,
  ];
  // LC_ALL=C: every non-ASCII byte of a name is listed as an octal escape.
  // detached: its own process group, so a kill reaches every stage of the pipeline.
  const child = spawn("bash", args, {
    stdio: ["pipe", "pipe", "pipe"],
    env: { ...process.env, LC_ALL: "C" },
    detached: true,
  });
  const killAll = () => {
    try {
      if (child.pid) process.kill(-child.pid, "SIGKILL");
    } catch {
      // already gone
    }
  };
  const out: Buffer[] = [];
  let err = "";
  child.stdout.on("data", (b: Buffer) => out.push(b));
  child.stderr.on("data", (b: Buffer) => {
    if (err.length < 4000) err += b.toString();
  });
  const exited = new Promise<number>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code, signal) => resolve(code ?? (signal ? 128 : -1)));
  });
  const onAbort = () => killAll();
  opts.signal?.addEventListener("abort", onAbort, { once: true });

  let open = true;
  child.stdin.on("error", () => {
    open = false; // EPIPE: the pipeline stopped reading; the rest still goes through the digest check
  });
  child.stdin.on("close", () => {
    open = false;
  });
  const hash = createHash("sha256");
  let bytes = 0;
  let feedError: unknown;
  try {
    for await (const chunk of source) {
      hash.update(chunk);
      bytes += chunk.length;
      opts.onBytes?.(bytes);
      if (!open || child.stdin.write(chunk)) continue;
      await new Promise<void>((resolve) => {
        const done = () => {
          child.stdin.off("drain", done);
          child.stdin.off("close", done);
          resolve();
        };
        child.stdin.on("drain", done);
        child.stdin.on("close", done);
      });
    }
  } catch (e) {
    feedError = e;
  }
  if (open) child.stdin.end();
  if (feedError) killAll();
  try {
    // Every stage holds stdout/stderr, so this waits until none is left writing into dest.
    const code = await exited;
    if (opts.signal?.aborted)
      throw new BerthError("cancelled", `unpacking layer ${layer.digest} was cancelled`);
    if (feedError) throw feedError;
    const got = `sha256:${hash.digest("hex")}`;
    if (got !== layer.digest || (layer.size >= 0 && bytes !== layer.size)) {
      throw new BerthError(
        "internal",
        `layer ${layer.digest} failed its digest check: got ${got}, ${bytes} bytes (want ${layer.size})`,
        { digest: layer.digest },
      );
    }
    if (code !== 0) {
      throw new BerthError(
        "internal",
        `unpacking layer ${layer.digest} failed (exit ${code}): ${err.trim().slice(0, 800)}`,
      );
    }
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
  }
  const whiteouts = whiteoutsOf(Buffer.concat(out).toString("latin1"));
  if (whiteouts.length > 0) await convertWhiteouts(tools, dest, layer, whiteouts);
  return { bytes };
}

/** Decodes one name of tar's `--quoting-style=escape` listing (run with LC_ALL=C: pure ASCII) to its raw bytes. */
export function unescapeTarName(line: string): Buffer {
  const bytes: number[] = [];
  const simple: Record<string, number> = { a: 7, b: 8, f: 12, n: 10, r: 13, t: 9, v: 11 };
  for (let i = 0; i < line.length; i++) {
    if (line[i] !== "\\") {
      bytes.push(line.charCodeAt(i) & 0xff);
      continue;
    }
    const oct = /^[0-7]{3}/.exec(line.slice(i + 1, i + 4));
    if (oct) {
      bytes.push(Number.parseInt(oct[0], 8));
      i += 3;
    } else {
      const next = line[i + 1] ?? "";
      bytes.push(simple[next] ?? next.charCodeAt(0));
      i += 1;
    }
  }
  return Buffer.from(bytes);
}

/** The whiteout entries (`.wh.` names) of tar's verbose listing, as raw paths relative to the layer root. */
export function whiteoutsOf(listing: string): Buffer[] {
  const found: Buffer[] = [];
  for (const line of listing.split("\n")) {
    if (!line.includes(".wh.")) continue;
    const name = unescapeTarName(line)
      .toString("latin1")
      .replace(/^(\.\/)+/, "")
      .replace(/^\/+/, "")
      .replace(/\/+$/, "");
    const base = name.slice(name.lastIndexOf("/") + 1);
    if (base.startsWith(".wh.")) found.push(Buffer.from(name, "latin1"));
  }
  return found;
}

// Reads NUL-separated relative paths of `.wh.` files; each must lie inside
// the root once its directory is resolved (tar never writes outside it, but
// a directory may be a symlink made by the same layer).
const CONVERT = String.raw`
import os, stat, sys
root = os.path.realpath(sys.argv[1].encode())
for rel in sys.stdin.buffer.read().split(b"\0"):
    if not rel:
        continue
    d, base = os.path.split(rel)
    parent = os.path.realpath(os.path.join(root, d))
    if parent != root and not parent.startswith(root + b"/"):
        sys.exit("whiteout %r leaves the layer" % rel)
    path = os.path.join(parent, base)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        continue
    os.unlink(path)
    if base == b".wh..wh..opq":
        os.setxattr(parent, "trusted.overlay.opaque", b"y", follow_symlinks=False)
    else:
        try:
            os.mknod(os.path.join(parent, base[4:]), 0o600 | stat.S_IFCHR, os.makedev(0, 0))
        except FileExistsError:
            pass  # the layer also has the name itself: what it added wins
`;

async function convertWhiteouts(
  tools: LayerUnpackTools,
  dest: string,
  layer: OciDescriptor,
  names: Buffer[],
) {
  if (tools.rootless) {
    throw new BerthError(
      "failed_precondition",
      `layer ${layer.digest} deletes files (OCI whiteouts), which only an image store run as root can record as overlay whiteouts`,
      { digest: layer.digest },
    );
  }
  const py = spawn(tools.python, ["-I", "-c", CONVERT, dest], { stdio: ["pipe", "ignore", "pipe"] });
  let err = "";
  py.stderr.on("data", (b: Buffer) => {
    if (err.length < 4000) err += b.toString();
  });
  const exited = new Promise<number>((resolve, reject) => {
    py.on("error", reject);
    py.on("close", (code) => resolve(code ?? -1));
  });
  py.stdin.end(Buffer.concat(names.flatMap((n) => [n, Buffer.from([0])])));
  const code = await exited;
  if (code !== 0) {
    throw new BerthError(
      "internal",
      `converting the whiteouts of layer ${layer.digest} failed: ${err.trim().slice(-800)}`,
    );
  }
}
