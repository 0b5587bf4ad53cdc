// Builds tar.gz archives header by header, so tests can make entries `tar`
// itself would refuse to write (`..`, absolute names, pax overrides).

import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";

export interface TarEntry {
  name: string;
  /** "0" file (default when data is given), "5" directory, "2" symlink, "1" hard link, "3" char device. */
  type?: string;
  data?: string | Buffer;
  mode?: number;
  linkname?: string;
  /** A pax header overriding the name. */
  paxPath?: string;
}

function header(name: string, type: string, size: number, mode: number, linkname = ""): Buffer {
  const h = Buffer.alloc(512);
  h.write(name, 0, 100, "utf8");
  h.write(`${mode.toString(8).padStart(7, "0")}\0`, 100);
  h.write("0000000\0", 108);
  h.write("0000000\0", 116);
  h.write(`${size.toString(8).padStart(11, "0")}\0`, 124);
  h.write("00000000000\0", 136);
  h.write(type, 156);
  h.write(linkname, 157, 100, "utf8");
  h.write("ustar\0", 257);
  h.write("00", 263);
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(`${sum.toString(8).padStart(6, "0")}\0 `, 148);
  return h;
}

const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc((512 - (b.length % 512)) % 512)]);

export function tarGz(entries: TarEntry[]): Buffer {
  const parts: Buffer[] = [];
  for (const e of entries) {
    if (e.paxPath !== undefined) {
      const rec = ` path=${e.paxPath}\n`;
      let len = rec.length + 1;
      while (`${len}${rec}`.length !== len) len = `${len}${rec}`.length;
      const body = Buffer.from(`${len}${rec}`);
      parts.push(header("PaxHeader", "x", body.length, 0o644), pad(body));
    }
    const data = e.data === undefined ? Buffer.alloc(0) : Buffer.from(e.data);
    const type = e.type ?? "0";
    parts.push(
      header(
        e.name,
        type,
        type === "0" ? data.length : 0,
        e.mode ?? (type === "5" ? 0o755 : 0o644),
        e.linkname,
      ),
    );
    if (type === "0") parts.push(pad(data));
  }
  parts.push(Buffer.alloc(1024));
  return gzipSync(Buffer.concat(parts));
}

export const sha256Hex = (b: Buffer) => createHash("sha256").update(b).digest("hex");

/** Yields `data` in chunks of `size` bytes, optionally waiting between them. */
export async function* chunks(data: Buffer, size = 64 * 1024, delayMs = 0): AsyncGenerator<Uint8Array> {
  for (let off = 0; off < data.length; off += size) {
    if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
    yield data.subarray(off, off + size);
  }
}
