// An ExecSession backed by the Exec bidi stream. open() resolves once the
// agent says the process started, so a bad container id or command fails the
// exec() call itself, as it does locally. Output is buffered without bound:
// `exit` must resolve even when nobody reads `output`.

import * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import { AsyncQueue } from "./async-queue.ts";
import type { ExecOutput, ExecRequest, ExecSession } from "../containers.ts";
import type { RpcChannel } from "./container-client.ts";
import { execRequestToProto } from "./container-convert.ts";
import { fromGrpcError } from "./errors.ts";

type WireExecOutput =
  | { output: "started" }
  | { output: "stdout"; stdout: Buffer }
  | { output: "stderr"; stderr: Buffer }
  | { output: "exitCode"; exitCode: number };

type BidiMethod = (
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
) => grpc.ClientDuplexStream<unknown, unknown>;

export class RpcExecSession implements ExecSession {
  readonly output: AsyncIterable<ExecOutput>;
  readonly exit: Promise<number>;
  private readonly queue = new AsyncQueue<ExecOutput>();
  private finished = false;
  private stdinClosed = false;
  private settleExit!: { resolve: (code: number) => void; reject: (e: unknown) => void };

  private constructor(private readonly call: grpc.ClientDuplexStream<unknown, unknown>) {
    this.output = this.queue;
    this.exit = new Promise<number>((resolve, reject) => {
      this.settleExit = { resolve, reject };
    });
    // Callers that only read `output` still see the error there.
    this.exit.catch(() => {});
  }

  static open(ch: RpcChannel, containerId: string, req: ExecRequest): Promise<RpcExecSession> {
    const fn = (ch.client as unknown as Record<string, BidiMethod>)["Exec"];
    if (!fn) return Promise.reject(new BerthError("internal", "agent client: no method Exec in agent.proto"));
    const start = { start: { containerId, request: execRequestToProto(req) } };
    const call = fn.call(ch.client, new grpc.Metadata(), {});
    const session = new RpcExecSession(call);
    const ctx = { address: ch.address, deadlineMs: ch.deadlineMs };
    return new Promise<RpcExecSession>((resolve, reject) => {
      let started = false;
      let exitCode: number | undefined;
      const timer = setTimeout(() => {
        call.cancel();
        reject(
          new BerthError(
            "unavailable",
            `agent at ${ch.address} did not start the exec in ${containerId} within ${ch.deadlineMs} ms`,
          ),
        );
      }, ch.deadlineMs);
      call.on("data", (msg: WireExecOutput) => {
        if (!started) {
          clearTimeout(timer);
          started = true;
          if (msg.output !== "started") {
            call.cancel();
            reject(new BerthError("internal", `the agent sent ${msg.output} before the exec started`));
            return;
          }
          resolve(session);
          return;
        }
        if (msg.output === "stdout")
          session.queue.push({ stream: "stdout", data: new Uint8Array(msg.stdout) });
        else if (msg.output === "stderr")
          session.queue.push({ stream: "stderr", data: new Uint8Array(msg.stderr) });
        else if (msg.output === "exitCode") exitCode = msg.exitCode;
      });
      call.on("error", (e) => {
        clearTimeout(timer);
        const err = fromGrpcError(e, ctx);
        session.finish(err);
        if (!started) reject(err);
      });
      call.on("end", () => {
        clearTimeout(timer);
        if (exitCode !== undefined) session.finish(undefined, exitCode);
        else
          session.finish(
            new BerthError("internal", `the exec stream from ${ch.address} ended without an exit code`),
          );
        if (!started)
          reject(new BerthError("internal", `the exec stream from ${ch.address} ended before it started`));
      });
      call.write(start);
    });
  }

  private finish(error: unknown, code?: number): void {
    if (this.finished) return;
    this.finished = true;
    if (error !== undefined) {
      this.queue.fail(error);
      this.settleExit.reject(error);
    } else {
      this.queue.end();
      this.settleExit.resolve(code!);
    }
    this.call.end();
  }

  private send(msg: object): void {
    if (!this.finished) this.call.write(msg);
  }

  writeStdin(data: Uint8Array): void {
    if (this.stdinClosed) throw new BerthError("failed_precondition", "exec: stdin is already closed");
    this.send({ stdin: Buffer.from(data) });
  }

  closeStdin(): void {
    if (this.stdinClosed) return;
    this.stdinClosed = true;
    this.send({ closeStdin: {} });
  }

  resize(cols: number, rows: number): void {
    this.send({ resize: { cols, rows } });
  }

  kill(signal?: NodeJS.Signals): void {
    this.send({ signal: signal ?? "" });
  }

  /** Abandons the exec: the agent kills the process and `exit` rejects as cancelled. */
  cancel(): void {
    this.call.cancel();
  }
}
