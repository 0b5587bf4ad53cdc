// Reads a tar.gz's headers (never its contents) and refuses anything but
// regular files and directories at safe relative paths. Done in-process,
// header by header, so what is judged is exactly what tar will see: the pax
// `path` and GNU long-name records that override a header's name included.

import { createReadStream } from "node:fs";
import { createGunzip } from "node:zlib";
import { invalid } from "../../shared/errors.ts";

const BLOCK = 512;

export interface TarLimits {
  /** Sum of the entries' sizes. */
  maxUnpackedBytes: number;
  maxEntries: number;
}

/** Why `path` may not be unpacked, or undefined when it is safe. */
export function unsafePathReason(path: string): string | undefined {
  if (path === "") return "an empty name";
  if (path.includes("\0")) return "a NUL byte in its name";
  if (path.startsWith("/")) return "an absolute path";
  if (path.split("/").some((part) => part === "..")) return "a '..' component";
  return undefined;
}

const cString = (b: Buffer, start: number, len: number) => {
  const field = b.subarray(start, start + len);
  const end = field.indexOf(0);
  return field.subarray(0, end === -1 ? len : end).toString("utf8");
};

function octal(b: Buffer, start: number, len: number, what: string): number {
  const field = b.subarray(start, start + len);
  // GNU base-256 for sizes of 8 GiB and more: far over any limit here.
  if (((field[0] ?? 0) & 0x80) !== 0) throw invalid(`code archive: ${what} is too large`);
  const text = cString(b, start, len).trim();
  if (text === "") return 0;
  if (!/^[0-7]+$/.test(text)) throw invalid(`code archive: ${what} is not an octal number`);
  return Number.parseInt(text, 8);
}

/** `key=value` records of a pax header: "LEN key=value\n". */
function paxRecords(data: Buffer): Map<string, string> {
  const out = new Map<string, string>();
  let i = 0;
  while (i < data.length) {
    const space = data.indexOf(0x20, i);
    if (space === -1) break;
    const len = Number(data.subarray(i, space).toString());
    if (!Number.isInteger(len) || len <= 0 || i + len > data.length) {
      throw invalid("code archive: a pax header is malformed");
    }
    const record = data.subarray(space + 1, i + len - 1).toString("utf8");
    const eq = record.indexOf("=");
    if (eq > 0) out.set(record.slice(0, eq), record.slice(eq + 1));
    i += len;
  }
  return out;
}

const TYPE_NAMES: Record<string, string> = {
  "1": "a hard link",
  "2": "a symbolic link",
  "3": "a character device",
  "4": "a block device",
  "6": "a FIFO",
  K: "a long link name",
  S: "a sparse file",
  V: "a volume header",
  M: "a multi-volume continuation",
};

/** Lists the archive's entry names; throws invalid_request naming the first entry that is not allowed. */
export async function checkTarGz(file: string, limits: TarLimits): Promise<string[]> {
  const names: string[] = [];
  let pending: Buffer = Buffer.alloc(0);
  // State of the entry being read: how many data bytes to skip or collect.
  let skip = 0;
  let collect: { type: string; size: number; chunks: Buffer[]; got: number } | undefined;
  let longName: string | undefined;
  let paxPath: string | undefined;
  let unpacked = 0;
  let ended = false;

  const header = (h: Buffer) => {
    if (h.every((x) => x === 0)) {
      ended = true;
      return;
    }
    const size = octal(h, 124, 12, "an entry size");
    const type = String.fromCharCode(h[156] ?? 0);
    const dataBlocks = Math.ceil(size / BLOCK) * BLOCK;
    if (type === "x" || type === "g" || type === "L") {
      if (size > 1024 * 1024) throw invalid("code archive: a metadata header is over 1 MiB");
      collect = { type, size, chunks: [], got: 0 };
      skip = dataBlocks;
      return;
    }
    const prefix = h.subarray(257, 263).toString("latin1").startsWith("ustar") ? cString(h, 345, 155) : "";
    const base = cString(h, 0, 100);
    const name = longName ?? paxPath ?? (prefix ? `${prefix}/${base}` : base);
    longName = undefined;
    paxPath = undefined;
    const label = JSON.stringify(name);
    const kind = TYPE_NAMES[type];
    if (kind)
      throw invalid(`code archive entry ${label} is ${kind}; only regular files and directories are allowed`);
    const isFile = type === "0" || type === "\0" || type === "7";
    if (!isFile && type !== "5") {
      throw invalid(
        `code archive entry ${label} has tar type ${JSON.stringify(type)}; only regular files and directories are allowed`,
      );
    }
    const unsafe = unsafePathReason(name.replace(/^(\.\/)+/, "") || ".");
    if (unsafe) throw invalid(`code archive entry ${label} is unsafe: ${unsafe}`);
    names.push(name);
    if (names.length > limits.maxEntries) {
      throw invalid(`code archive has more than ${limits.maxEntries} entries`);
    }
    unpacked += size;
    if (unpacked > limits.maxUnpackedBytes) {
      throw invalid(`code archive unpacks to more than ${limits.maxUnpackedBytes} bytes`);
    }
    skip = dataBlocks;
  };

  const consume = (buf: Buffer) => {
    pending = pending.length ? Buffer.concat([pending, buf]) : buf;
    let off = 0;
    while (!ended) {
      if (skip > 0) {
        const n = Math.min(skip, pending.length - off);
        if (n === 0) break;
        if (collect && collect.got < collect.size) {
          const part = pending.subarray(off, off + Math.min(n, collect.size - collect.got));
          collect.chunks.push(Buffer.from(part));
          collect.got += part.length;
        }
        off += n;
        skip -= n;
        if (skip === 0 && collect) {
          const data = Buffer.concat(collect.chunks);
          if (collect.type === "L") longName = cString(data, 0, data.length);
          if (collect.type === "x") paxPath = paxRecords(data).get("path") ?? paxPath;
          collect = undefined;
        }
        continue;
      }
      if (pending.length - off < BLOCK) break;
      header(pending.subarray(off, off + BLOCK));
      off += BLOCK;
    }
    pending = pending.subarray(off);
  };

  const gunzip = createGunzip();
  const input = createReadStream(file);
  try {
    for await (const chunk of input.pipe(gunzip)) {
      consume(chunk as Buffer);
      if (ended) break;
    }
  } catch (e) {
    if ((e as { code?: string }).code === "invalid_request") throw e;
    throw invalid(`code archive is not a valid tar.gz: ${(e as Error).message}`);
  } finally {
    input.destroy();
    gunzip.destroy();
  }
  if (!ended && (skip > 0 || pending.length > 0 || collect)) {
    throw invalid("code archive is truncated");
  }
  return names;
}
