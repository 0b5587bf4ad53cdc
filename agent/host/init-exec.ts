// The agent's side of a sandbox's process server (sdk/python/berth/runtime/sandbox_init.py,
// docs/sandboxes.md "Process server"): one unix connection per process, frames
// of kind (1 byte) + length (4 bytes, big-endian) + payload. Starting a
// process this way costs a fork in the container instead of a `runc exec`
// (a Go runtime start, nsenter, cgroup join, seccomp load).
//
// What the server sends is read as untrusted: a process in the container that
// is root there could replace the socket, and would then only be lying to us
// about its own sandbox; frames are bounded and every field is checked.

import { createConnection, type Socket } from "node:net";
import { constants } from "node:os";
import type { ExecSession } from "../../api/index.ts";
import { OutputQueue, type ResolvedExecRequest } from "./exec.ts";

export const InitFrame = {
  // Agent → server.
  start: 0x53, // "S" JSON {args, env, cwd?, user?: [uid, gid]}; first and once
  stdin: 0x49, // "I" raw bytes
  closeStdin: 0x43, // "C" empty
  signal: 0x4b, // "K" JSON {signal: number}
  // Server → agent.
  started: 0x50, // "P" JSON {pid}
  stdout: 0x4f, // "O" raw bytes
  stderr: 0x45, // "E" raw bytes
  exit: 0x58, // "X" JSON {exit_code}: 128+signo when killed; after all output
  failed: 0x46, // "F" JSON {stage, errno, message}: the process never ran
} as const;

const HEADER_BYTES = 5;
export const MAX_INIT_FRAME = 1 << 20;
/** runc exec's exit status when the process could not be started; the fast path reports the same. */
export const EXEC_FAILED_EXIT_CODE = 255;

export function encodeInitFrame(kind: number, payload: Uint8Array = new Uint8Array(0)): Buffer {
  const header = Buffer.alloc(HEADER_BYTES);
  header[0] = kind;
  header.writeUInt32BE(payload.length, 1);
  return Buffer.concat([header, payload]);
}

const jsonFrame = (kind: number, obj: unknown) => encodeInitFrame(kind, Buffer.from(JSON.stringify(obj)));

/** Splits a byte stream into frames; throws on a frame over the limit. */
export class InitFrameDecoder {
  private buf: Buffer = Buffer.alloc(0);

  push(data: Buffer): { kind: number; payload: Buffer }[] {
    this.buf = this.buf.length === 0 ? data : Buffer.concat([this.buf, data]);
    const out: { kind: number; payload: Buffer }[] = [];
    while (this.buf.length >= HEADER_BYTES) {
      const size = this.buf.readUInt32BE(1);
      if (size > MAX_INIT_FRAME)
        throw new Error(`frame of ${size} bytes is over the ${MAX_INIT_FRAME} limit`);
      if (this.buf.length < HEADER_BYTES + size) break;
      out.push({
        kind: this.buf[0] as number,
        payload: this.buf.subarray(HEADER_BYTES, HEADER_BYTES + size),
      });
      this.buf = this.buf.subarray(HEADER_BYTES + size);
    }
    return out;
  }
}

interface Failure {
  stage?: unknown;
  errno?: unknown;
  message?: unknown;
}

/** The line runc exec writes to its stderr for the same failure (logrus's format). */
export function runcStyleFailure(r: ResolvedExecRequest, f: Failure): string {
  const message = typeof f.message === "string" ? f.message : "unknown error";
  const reason = message.charAt(0).toLowerCase() + message.slice(1);
  const cmd = JSON.stringify(r.args[0]);
  let what: string;
  if (f.stage === "exec" && f.errno === 2 && !r.args[0]?.includes("/")) {
    what = `exec: ${cmd}: executable file not found in $PATH`;
  } else if (f.stage === "exec") {
    what = `exec: ${cmd}: ${reason}`;
  } else if (f.stage === "cwd") {
    what = `chdir to cwd (${JSON.stringify(r.cwd)}) set in config.json failed: ${reason}`;
  } else {
    what = `${String(f.stage ?? "setup")}: ${reason}`;
  }
  const msg = JSON.stringify(`exec failed: unable to start container process: ${what}`);
  return `time="${new Date().toISOString().slice(0, 19)}Z" level=error msg=${msg}\n`;
}

function parseJson(payload: Buffer): Record<string, unknown> {
  const v = JSON.parse(payload.toString("utf8")) as unknown;
  if (typeof v !== "object" || v === null || Array.isArray(v)) throw new Error("a JSON object was expected");
  return v as Record<string, unknown>;
}

/** A connection to the server on socketPath; undefined when there is none to connect to. */
export function connectInit(socketPath: string): Promise<Socket | undefined> {
  return new Promise((resolve) => {
    const sock = createConnection(socketPath);
    sock.once("connect", () => {
      sock.removeAllListeners("error");
      resolve(sock);
    });
    sock.once("error", () => resolve(undefined));
  });
}

/**
 * Starts `r` through a process server connection that `connect` makes (or
 * had made ahead); undefined when there is no server or it closes before
 * saying the process started (then nothing ran and the caller falls back to
 * runc exec).
 */
export async function startInitExec(
  connect: () => Promise<Socket | undefined>,
  r: ResolvedExecRequest,
): Promise<ExecSession | undefined> {
  const sock = await connect();
  if (!sock) return undefined;
  sock.setNoDelay(true);
  const start: Record<string, unknown> = { args: r.args, env: r.env };
  if (r.cwd) start.cwd = r.cwd;
  if (r.user) start.user = [r.user.uid, r.user.gid];
  sock.write(jsonFrame(InitFrame.start, start));

  const output = new OutputQueue(1);
  const decoder = new InitFrameDecoder();
  let started = false;
  let finished = false;
  let settleStart: (ok: boolean) => void = () => {};
  const startAnswered = new Promise<boolean>((resolve) => {
    settleStart = resolve;
  });
  let settleExit: (code: number) => void = () => {};
  const exit = new Promise<number>((resolve) => {
    settleExit = (code) => {
      if (finished) return;
      finished = true;
      resolve(code);
    };
  });
  let outputEnded = false;
  // The output ends here, not at the socket's close: the exit frame comes
  // after all output, and the close is reported a loop turn later.
  const end = (code: number, why?: string) => {
    if (why && !finished) output.push({ stream: "stderr", data: Buffer.from(`berth: ${why}\n`) });
    settleExit(code);
    settleStart(started);
    sock.destroy();
    if (!outputEnded) {
      outputEnded = true;
      output.end();
    }
  };

  sock.on("data", (data: Buffer) => {
    let frames: { kind: number; payload: Buffer }[];
    try {
      frames = decoder.push(data);
    } catch (e) {
      end(EXEC_FAILED_EXIT_CODE, `the sandbox's process server broke the protocol: ${(e as Error).message}`);
      return;
    }
    for (const f of frames) {
      try {
        if (f.kind === InitFrame.stdout || f.kind === InitFrame.stderr) {
          const stream = f.kind === InitFrame.stdout ? "stdout" : "stderr";
          output.push({ stream, data: new Uint8Array(f.payload) });
        } else if (f.kind === InitFrame.started && !started) {
          started = true;
          settleStart(true);
        } else if (f.kind === InitFrame.exit) {
          const code = parseJson(f.payload).exit_code;
          if (typeof code !== "number" || !Number.isInteger(code) || code < 0 || code > 255) {
            throw new Error(`exit_code ${JSON.stringify(code)} is not 0..255`);
          }
          end(code);
        } else if (f.kind === InitFrame.failed) {
          started = true;
          output.push({ stream: "stderr", data: Buffer.from(runcStyleFailure(r, parseJson(f.payload))) });
          end(EXEC_FAILED_EXIT_CODE);
        } else {
          throw new Error(`unexpected frame kind ${f.kind}`);
        }
      } catch (e) {
        end(
          EXEC_FAILED_EXIT_CODE,
          `the sandbox's process server broke the protocol: ${(e as Error).message}`,
        );
        return;
      }
    }
  });
  sock.on("error", () => {});
  sock.on("close", () => {
    // Closed without an exit: the server (the container's init) went away.
    end(EXEC_FAILED_EXIT_CODE, started ? "the sandbox's process server went away" : undefined);
  });

  if (!(await startAnswered)) return undefined;
  return {
    output,
    writeStdin: (data) => {
      if (!finished && data.length > 0) {
        for (let at = 0; at < data.length; at += MAX_INIT_FRAME) {
          sock.write(encodeInitFrame(InitFrame.stdin, data.subarray(at, at + MAX_INIT_FRAME)));
        }
      }
    },
    closeStdin: () => {
      if (!finished) sock.write(encodeInitFrame(InitFrame.closeStdin));
    },
    kill: (signal: NodeJS.Signals = "SIGKILL") => {
      const no = (constants.signals as Record<string, number>)[signal];
      if (!finished && no !== undefined) sock.write(jsonFrame(InitFrame.signal, { signal: no }));
    },
    exit,
  };
}
