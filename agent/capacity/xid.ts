// XID errors: the NVIDIA driver writes one line to the kernel log for each
// ("NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.").
// nvidia-smi's query has no field for them, so the agent reads the kernel
// log itself (/dev/kmsg, as dcgm and node-problem-detector do).

import { closeSync, constants, openSync, readSync } from "node:fs";
import { uptime } from "node:os";
import { normalizePciBusId } from "./gpu-telemetry.ts";

/**
 * XIDs after which the GPU is not to be trusted with new work until it is
 * reset or replaced (NVIDIA's XID catalog, resolution RESET_GPU or worse):
 * 48 double-bit ECC error, 62 internal micro-controller halt, 64 ECC page
 * retirement or row remapping failure, 74 NVLink error, 79 fallen off the
 * bus, 92 high single-bit ECC rate, 94 contained and 95 uncontained ECC
 * error, 119 and 120 GSP timeout or error, 140 unrecovered ECC error.
 */
export const FATAL_XIDS: ReadonlySet<number> = new Set([48, 62, 64, 74, 79, 92, 94, 95, 119, 120, 140]);

const XID_NAMES: Record<number, string> = {
  48: "double-bit ECC error",
  62: "internal micro-controller halt",
  64: "ECC page retirement or row remapping failure",
  74: "NVLink error",
  79: "GPU has fallen off the bus",
  92: "high single-bit ECC error rate",
  94: "contained ECC error",
  95: "uncontained ECC error",
  119: "GSP RPC timeout",
  120: "GSP error",
  140: "unrecovered ECC error",
};

/** "XID 79 (GPU has fallen off the bus)"; codes without a name here say only the number. */
export function describeXid(code: number): string {
  const name = XID_NAMES[code];
  return name ? `XID ${code} (${name})` : `XID ${code}`;
}

export interface XidEvent {
  /** Normalised ("0000:3b:00"), as normalizePciBusId writes it. */
  pciBusId: string;
  code: number;
  /** ms since epoch. */
  at: number;
  /** The driver's line after "NVRM: ". */
  text: string;
}

const XID_LINE = /NVRM: (Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)\b.*)$/;

/** Reads one kernel log message; undefined for anything that is not an XID line. */
export function parseXidMessage(message: string, at: number): XidEvent | undefined {
  const m = XID_LINE.exec(message.trim());
  if (!m) return undefined;
  const bus = normalizePciBusId(m[2]!);
  if (!bus) return undefined;
  return { pciBusId: bus, code: Number(m[3]), at, text: m[1]! };
}

/**
 * Reads /dev/kmsg records ("prio,seq,usec,flags;message", continuation lines
 * starting with a space) into XID events. `bootMs` turns the record's
 * microseconds since boot into wall time.
 */
export function parseKmsg(text: string, bootMs: number): XidEvent[] {
  const out: XidEvent[] = [];
  for (const line of text.split("\n")) {
    const semi = line.indexOf(";");
    if (semi < 0 || line.startsWith(" ")) continue;
    const usec = Number(line.slice(0, semi).split(",")[2]);
    const at = Number.isFinite(usec) ? Math.round(bootMs + usec / 1000) : Date.now();
    const ev = parseXidMessage(line.slice(semi + 1), at);
    if (ev) out.push(ev);
  }
  return out;
}

export interface KernelLogXidReaderOptions {
  /** @default "/dev/kmsg" */
  path?: string;
  /** When the machine booted, ms since epoch. @default now less os.uptime() */
  bootMs?: number;
}

/**
 * Follows the kernel log without blocking: each read() returns the XID
 * events logged since the previous one (the first returns those still in
 * the kernel's buffer). Reading /dev/kmsg needs root or CAP_SYSLOG; without
 * it read() throws once, naming the cause, and the caller stops asking.
 */
export class KernelLogXidReader {
  private fd: number | undefined;
  private readonly path: string;
  private readonly bootMs: number;
  private readonly buf = Buffer.alloc(16 * 1024);

  constructor(o: KernelLogXidReaderOptions = {}) {
    this.path = o.path ?? "/dev/kmsg";
    this.bootMs = o.bootMs ?? Date.now() - uptime() * 1000;
  }

  read(): XidEvent[] {
    if (this.fd === undefined) this.fd = openSync(this.path, constants.O_RDONLY | constants.O_NONBLOCK);
    const chunks: string[] = [];
    for (;;) {
      let n: number;
      try {
        n = readSync(this.fd, this.buf, 0, this.buf.length, null);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code === "EAGAIN") break; // nothing more logged
        if (code === "EPIPE") continue; // records were overwritten before we read them; go on
        throw e;
      }
      if (n === 0) break; // a regular file at its end
      // /dev/kmsg returns one whole record, newline included, per read.
      chunks.push(this.buf.toString("utf8", 0, n));
    }
    return parseKmsg(chunks.join(""), this.bootMs);
  }

  close(): void {
    if (this.fd !== undefined) closeSync(this.fd);
    this.fd = undefined;
  }
}
