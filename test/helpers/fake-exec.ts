// The fake agent's execs: a FakeExec the test drives (write, finish) or a
// script plays, and the small `sh -c` vocabulary the scripted fake plays
// (test/helpers/fake-container-api.ts describes it).

import { constants } from "node:os";
import { AsyncQueue } from "../../api/grpc/index.ts";
import type { ExecOutput, ExecRequest, ExecSession } from "../../api/index.ts";

const upper = (b: Uint8Array) => Uint8Array.from(b, (c) => (c >= 0x61 && c <= 0x7a ? c - 32 : c));
const signo = (s: NodeJS.Signals) => constants.signals[s] ?? 9;

/** An exec the test drives (write, finish) or a script plays; it records stdin, resizes and kills. */
export class FakeExec implements ExecSession {
  readonly queue = new AsyncQueue<ExecOutput>();
  readonly output: AsyncIterable<ExecOutput> = this.queue;
  readonly exit: Promise<number>;
  readonly stdin: Buffer[] = [];
  stdinClosed = false;
  /** Each kill's signal, "default" when none was named (the host then sends SIGKILL). */
  readonly signals: (NodeJS.Signals | "default")[] = [];
  resized?: [number, number];
  /** Called with each stdin chunk and at its close (null): a script's input. */
  onStdin?: (data: Uint8Array | null) => void;
  private ended = false;
  private settle!: (code: number) => void;

  constructor(readonly req: ExecRequest) {
    this.exit = new Promise((resolve) => {
      this.settle = resolve;
    });
  }

  get killedWith(): NodeJS.Signals | "default" | undefined {
    return this.signals.at(-1);
  }
  get finished(): boolean {
    return this.ended;
  }

  write(stream: "stdout" | "stderr", data: string | Uint8Array): void {
    this.queue.push({ stream, data: typeof data === "string" ? Buffer.from(data) : data });
  }
  finish(code: number): void {
    if (this.ended) return;
    this.ended = true;
    this.queue.end();
    this.settle(code);
  }
  writeStdin(data: Uint8Array): void {
    this.stdin.push(Buffer.from(data));
    this.onStdin?.(data);
  }
  closeStdin(): void {
    this.stdinClosed = true;
    this.onStdin?.(null);
  }
  resize(cols: number, rows: number): void {
    this.resized = [cols, rows];
  }
  kill(signal?: NodeJS.Signals): void {
    this.signals.push(signal ?? "default");
    this.finish(128 + signo(signal ?? "SIGKILL"));
  }
}

type Statement = { echo: string; stream: "stdout" | "stderr" } | { sleepMs: number } | { exit: number };

/** `sh -c` scripts of echo, sleep and exit only; undefined for anything else. */
export function parseScript(args: string[] | undefined): Statement[] | undefined {
  if (!args || args.length < 3 || args[0] !== "sh" || args[1] !== "-c") return undefined;
  const out: Statement[] = [];
  for (const raw of args[2]!.split(/;|\n/)) {
    const s = raw.trim();
    if (s === "") continue;
    let m = /^echo(?: (.*?))?( >&2)?$/.exec(s);
    if (m) {
      out.push({ echo: (m[1] ?? "").replace(/^(['"])(.*)\1$/, "$2"), stream: m[2] ? "stderr" : "stdout" });
      continue;
    }
    m = /^sleep (\d+(?:\.\d+)?)$/.exec(s);
    if (m) {
      out.push({ sleepMs: Number(m[1]) * 1000 });
      continue;
    }
    m = /^exit (\d+)$/.exec(s);
    if (m) {
      out.push({ exit: Number(m[1]) });
      continue;
    }
    return undefined;
  }
  return out;
}

/** Plays the scripted vocabulary (see the file's header) on an exec; false when args are not in it. */
export function playExec(e: FakeExec, alive: () => boolean): boolean {
  const [cmd, arg, msg] = e.req.args;
  if (cmd === "upper" || cmd === "cat") {
    e.onStdin = (d) => {
      if (d === null) e.finish(0);
      else e.write("stdout", cmd === "upper" ? upper(d) : Uint8Array.from(d));
    };
    return true;
  }
  if (cmd === "exit" && e.req.args.length <= 3) {
    e.write("stdout", msg ?? "");
    e.write("stderr", "bye\n");
    e.finish(Number(arg));
    return true;
  }
  if (cmd === "sleep" && e.req.args.length === 1) return true;
  const script = parseScript(e.req.args);
  if (!script) return false;
  void play(script, (stream, line) => e.write(stream, `${line}\n`), alive).then((code) => {
    if (code !== undefined) e.finish(code);
  });
  return true;
}

/** Runs a script's statements: the exit code, or undefined when `alive` turned false first. */
export async function play(
  script: Statement[],
  echo: (stream: "stdout" | "stderr", line: string) => void,
  alive: () => boolean,
): Promise<number | undefined> {
  for (const s of script) {
    if (!alive()) return undefined;
    if ("echo" in s) echo(s.stream, s.echo);
    else if ("exit" in s) return s.exit;
    else {
      const until = Date.now() + s.sleepMs;
      while (alive() && Date.now() < until) await new Promise((r) => setTimeout(r, Math.min(20, s.sleepMs)));
    }
  }
  return alive() ? 0 : undefined;
}
