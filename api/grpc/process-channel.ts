// The client's end of ProcessChannel (proto/agent.proto): many RunProcess
// runs on one long-lived stream to the agent. A call per run costs each side
// a stream's setup and teardown (headers, trailers, a status), which on a
// busy host is most of an exec round trip's time between coordinator and
// agent; a run on the channel is one message out and its events back.
//
// The stream opens with the first run and stays open; when it fails or ends
// (the agent restarted, the connection broke), every run on it fails with
// `unavailable` and the next run opens a new one. An agent that does not
// know the channel answers UNIMPLEMENTED: the runs on it are started again
// with RunProcess, and this client uses RunProcess from then on.

import * as grpc from "@grpc/grpc-js";
import { BerthError, CATALOG, type ErrorCode } from "../../shared/errors.ts";
import type { ExecRequest } from "../containers.ts";
import { AsyncQueue } from "./async-queue.ts";
import { type RpcChannel, method } from "./container-client.ts";
import { execRequestToProto } from "./container-convert.ts";
import { fromGrpcError } from "./errors.ts";

/** ProcessRunEvent on the wire (process-client.ts converts it): `event` names the one field set. */
interface WireRunEvent {
  event?: "started" | "stdout" | "stderr" | "ended";
  stdout?: Buffer;
  stderr?: Buffer;
}

/**
 * Bytes of a run's output the agent sends before the client gives credit
 * back: a reader that stops holds at most this much of it in the client.
 */
export const RUN_WINDOW = 1024 * 1024;

export interface WireChannelRequest {
  run: number;
  start?: { containerId: string; request: unknown };
  cancel?: boolean;
  credit?: number;
}

export interface WireChannelError {
  code: string;
  message: string;
  details?: Buffer;
}

export interface WireChannelEvent {
  run: number;
  what?: "event" | "error" | "done";
  event?: WireRunEvent | null;
  error?: WireChannelError | null;
  done?: boolean;
}

/** A run's end as the channel reports it to the run's reader. */
type RunItem = { event: WireRunEvent } | { error: BerthError };

/** Thrown into the runs of a channel the agent does not serve: they start again with RunProcess. */
export class ChannelUnsupported extends Error {}

const isCatalogCode = (s: string): s is ErrorCode => Object.hasOwn(CATALOG, s);

/** The BerthError a ProcessChannelError names (an unknown code reads as internal). */
export function channelErrorFromProto(w: WireChannelError, address: string): BerthError {
  let details: Record<string, unknown> | undefined;
  if (w.details && w.details.length > 0) {
    try {
      const parsed: unknown = JSON.parse(w.details.toString("utf8"));
      if (parsed && typeof parsed === "object") details = parsed as Record<string, unknown>;
    } catch {
      details = undefined;
    }
  }
  if (isCatalogCode(w.code)) return new BerthError(w.code, w.message, details);
  return new BerthError("internal", `agent at ${address}: ${w.message} (${w.code})`);
}

type DuplexMethod = (
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
) => grpc.ClientDuplexStream<WireChannelRequest, WireChannelEvent>;

/** One open stream and the runs on it. */
class OpenChannel {
  readonly runs = new Map<number, AsyncQueue<RunItem>>();
  private ended = false;
  private closing = false;

  constructor(
    private readonly call: grpc.ClientDuplexStream<WireChannelRequest, WireChannelEvent>,
    private readonly ch: RpcChannel,
    onEnd: (ch: OpenChannel, unsupported: boolean) => void,
  ) {
    call.on("data", (w: WireChannelEvent) => this.deliver(w));
    const finish = (e?: unknown) => {
      if (this.ended) return;
      this.ended = true;
      const code = (e as Partial<grpc.ServiceError> | undefined)?.code;
      const unsupported = code === grpc.status.UNIMPLEMENTED;
      const error = unsupported
        ? new ChannelUnsupported()
        : e === undefined
          ? new BerthError("unavailable", `agent at ${ch.address} closed the process channel`)
          : fromGrpcError(e, { address: ch.address, deadlineMs: ch.deadlineMs });
      for (const q of this.runs.values()) q.fail(error);
      this.runs.clear();
      onEnd(this, unsupported);
    };
    call.on("error", finish);
    call.on("end", () => finish());
  }

  get open(): boolean {
    return !this.ended && !this.closing;
  }

  send(req: WireChannelRequest): void {
    if (!this.ended && !this.closing) this.call.write(req);
  }

  /**
   * No more runs: the runs being read finish, then the stream goes (at once
   * when none is). A closing stream can send nothing more, so a run whose
   * reader leaves meanwhile is stopped with the stream, once the rest end.
   */
  close(): void {
    this.closing = true;
    if (this.runs.size === 0) this.call.cancel();
    else this.call.end();
  }

  /** The run's reader left before its end: the agent stops sending it. */
  left(run: number): void {
    if (!this.runs.delete(run)) return;
    if (this.closing) this.settle();
    else this.send({ run, cancel: true });
  }

  private settle(): void {
    if (this.closing && this.runs.size === 0) this.call.cancel();
  }

  private deliver(w: WireChannelEvent): void {
    const q = this.runs.get(w.run);
    if (!q) return; // a run its reader left: its last events were still on the way
    if (w.what === "event" && w.event) {
      q.push({ event: w.event });
      if (w.event.event === "ended") this.finish(w.run, q);
    } else if (w.what === "error" && w.error) {
      q.push({ error: channelErrorFromProto(w.error, this.ch.address) });
      this.finish(w.run, q);
    } else {
      this.finish(w.run, q);
    }
  }

  private finish(run: number, q: AsyncQueue<RunItem>): void {
    this.runs.delete(run);
    q.end();
    this.settle();
  }
}

export class ProcessChannelClient {
  private current?: OpenChannel;
  private nextRun = 1;
  /** The agent answered UNIMPLEMENTED: runs go by RunProcess. */
  unsupported = false;

  constructor(private readonly ch: RpcChannel) {}

  /**
   * A run's events on the wire, as RunProcess streams them. Aborting
   * `signal` (or leaving the loop) stops them quietly; the process runs on.
   * Throws ChannelUnsupported, before any event, when the agent lacks the
   * channel.
   */
  async *run<W extends WireRunEvent>(
    containerId: string,
    req: ExecRequest,
    signal?: AbortSignal,
  ): AsyncGenerator<W> {
    if (signal?.aborted) return;
    const channel = this.channel();
    const run = this.nextRun;
    this.nextRun = this.nextRun >= 0xffffffff ? 1 : this.nextRun + 1;
    const queue = new AsyncQueue<RunItem>({ highWater: Number.POSITIVE_INFINITY });
    channel.runs.set(run, queue);
    const onAbort = () => queue.end();
    signal?.addEventListener("abort", onAbort, { once: true });
    let unread = 0;
    try {
      channel.send({ run, start: { containerId, request: execRequestToProto(req) } });
      for await (const item of queue) {
        if ("error" in item) throw item.error;
        const w = item.event;
        const output = w.event === "stdout" ? w.stdout : w.event === "stderr" ? w.stderr : undefined;
        if (output) {
          // Credit goes back in half windows: one message per 512 KiB read, none for short runs.
          unread += output.byteLength;
          if (unread >= RUN_WINDOW / 2 && channel.runs.has(run)) {
            channel.send({ run, credit: unread });
            unread = 0;
          }
        }
        yield w as W;
      }
    } finally {
      signal?.removeEventListener("abort", onAbort);
      channel.left(run);
    }
  }

  close(): void {
    this.current?.close();
    this.current = undefined;
  }

  private channel(): OpenChannel {
    if (this.current?.open) return this.current;
    const open = method<DuplexMethod>(this.ch, "ProcessChannel").call(
      this.ch.client,
      new grpc.Metadata(),
      {},
    );
    this.current = new OpenChannel(open, this.ch, (c, unsupported) => {
      if (unsupported) this.unsupported = true;
      if (this.current === c) this.current = undefined;
    });
    return this.current;
  }
}
