// ContainerApi over gRPC (the calls behind AgentRpcClient). Unary calls have
// a deadline (a long one for those that may pull an image or wait out a
// grace period); StreamLogs and Exec have none, they end with the container
// or process, or when the caller aborts.

import * as grpc from "@grpc/grpc-js";
import type { EgressPolicy } from "../../shared/egress.ts";
import { BerthError } from "../../shared/errors.ts";
import { AsyncQueue } from "./async-queue.ts";
import type {
  ContainerApi,
  ContainerStatus,
  ExecRequest,
  ImageGcResult,
  ImageSummary,
  ImportImageRequest,
  LogEntry,
  RunContainerRequest,
} from "../containers.ts";
import {
  type WireContainer,
  type WireImage,
  type WireLogEntry,
  containerFromProto,
  egressToProto,
  imageFromProto,
  logEntryFromProto,
  runRequestToProto,
} from "./container-convert.ts";
import { fromGrpcError } from "./errors.ts";
import { RpcExecSession } from "./exec-client.ts";
import {
  type WireGcImagesResponse,
  gcRequestToProto,
  gcResultFromProto,
  importRequestToProto,
} from "./image-convert.ts";

/** What the container calls need from AgentRpcClient. */
export interface RpcChannel {
  client: grpc.Client;
  address: string;
  deadlineMs: number;
  /** Deadline of calls that may pull an image or wait out a grace period. */
  longDeadlineMs: number;
}

/** A generated client's unary method, as `method()` hands it out. */
export type UnaryMethod = (
  request: object,
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
  callback: (err: grpc.ServiceError | null, res?: unknown) => void,
) => grpc.ClientUnaryCall;

type ClientStreamMethod = (
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
  callback: (err: grpc.ServiceError | null, res?: unknown) => void,
) => grpc.ClientWritableStream<unknown>;

/** Largest data field of one PutCode message (gRPC's default message limit is 4 MiB). */
const PUT_CODE_CHUNK_BYTES = 1024 * 1024;

type StreamMethod = (
  request: object,
  metadata: grpc.Metadata,
  options: grpc.CallOptions,
) => grpc.ClientReadableStream<unknown>;

export function method<T>(ch: RpcChannel, name: string): T {
  const fn = (ch.client as unknown as Record<string, T>)[name];
  if (!fn) throw new BerthError("internal", `agent client: no method ${name} in agent.proto`);
  return fn;
}

export function unaryCall(
  ch: RpcChannel,
  name: string,
  request: object,
  deadlineMs = ch.deadlineMs,
): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const fn = method<UnaryMethod>(ch, name);
    const deadline = new Date(Date.now() + deadlineMs);
    fn.call(ch.client, request, new grpc.Metadata(), { deadline }, (err, res) => {
      if (err) reject(fromGrpcError(err, { address: ch.address, deadlineMs }));
      else resolve(res);
    });
  });
}

/**
 * A server-streaming call's messages. No deadline: it ends with the stream,
 * quietly when `signal` aborts, and leaving the loop early stops the agent's
 * side. A full queue pauses the call, so a slow reader holds the agent back.
 */
export async function* streamCall<W>(
  ch: RpcChannel,
  name: string,
  request: object,
  o: { signal?: AbortSignal; highWater?: number } = {},
): AsyncGenerator<W> {
  const { signal } = o;
  if (signal?.aborted) return;
  const call = method<StreamMethod>(ch, name).call(ch.client, request, new grpc.Metadata(), {});
  const queue = new AsyncQueue<W>({
    onFull: () => call.pause(),
    onDrained: () => call.resume(),
    ...(o.highWater !== undefined ? { highWater: o.highWater } : {}),
  });
  call.on("data", (w: W) => queue.push(w));
  call.on("error", (e) => queue.fail(e));
  call.on("end", () => queue.end());
  const onAbort = () => call.cancel();
  signal?.addEventListener("abort", onAbort, { once: true });
  try {
    yield* queue;
  } catch (e) {
    if (signal?.aborted && (e as Partial<grpc.ServiceError>).code === grpc.status.CANCELLED) return;
    throw fromGrpcError(e, { address: ch.address, deadlineMs: ch.deadlineMs });
  } finally {
    signal?.removeEventListener("abort", onAbort);
    call.cancel();
  }
}

/**
 * A client-streaming call with the long deadline: sends `first`, then `data`
 * in messages of at most `chunkBytes`; the agent's answer. Once the agent
 * answered early (it has the data already, or refused it) nothing more is
 * sent; a failure while sending cancels the call, so the agent keeps nothing.
 */
export async function uploadCall(
  ch: RpcChannel,
  name: string,
  first: object,
  data: AsyncIterable<Uint8Array>,
  chunkBytes: number,
): Promise<unknown> {
  const deadlineMs = ch.longDeadlineMs;
  let settled = false;
  let call!: grpc.ClientWritableStream<unknown>;
  const done = new Promise<unknown>((resolve, reject) => {
    call = method<ClientStreamMethod>(ch, name).call(
      ch.client,
      new grpc.Metadata(),
      { deadline: new Date(Date.now() + deadlineMs) },
      (err, res) => {
        settled = true;
        if (err) reject(fromGrpcError(err, { address: ch.address, deadlineMs }));
        else resolve(res);
      },
    );
  });
  // Waits for room to write, or for the agent's answer (after which nothing drains).
  const write = (msg: object) =>
    call.write(msg)
      ? Promise.resolve()
      : Promise.race([new Promise<void>((r) => call.once("drain", () => r())), done.then(() => {})]);
  try {
    await write(first);
    for await (const chunk of data) {
      if (settled) break;
      for (let off = 0; off < chunk.byteLength; off += chunkBytes) {
        const part = chunk.subarray(off, off + chunkBytes);
        await write({ data: Buffer.from(part.buffer, part.byteOffset, part.byteLength) });
      }
    }
    call.end();
  } catch (e) {
    call.cancel();
    await done.catch(() => {});
    throw e;
  }
  return done;
}

function optionalUint(
  value: number | undefined,
  field: string,
  max = Number.MAX_SAFE_INTEGER,
): number | undefined {
  if (value === undefined) return undefined;
  if (!Number.isSafeInteger(value) || value < 0 || value > max) {
    throw new BerthError("invalid_request", `${field} must be an integer in 0..${max}, got ${value}`);
  }
  return value;
}

export class ContainerRpcClient implements ContainerApi {
  constructor(private readonly ch: RpcChannel) {}

  async runContainer(req: RunContainerRequest): Promise<ContainerStatus> {
    const wire = runRequestToProto(req);
    return containerFromProto(
      (await unaryCall(this.ch, "RunContainer", wire, this.ch.longDeadlineMs)) as WireContainer,
    );
  }

  async stopContainer(
    id: string,
    opts: { graceMs?: number; remove?: boolean } = {},
  ): Promise<ContainerStatus> {
    const req: { id: string; graceMs?: number; remove?: boolean } = { id };
    const graceMs = optionalUint(opts.graceMs, "graceMs");
    if (graceMs !== undefined) req.graceMs = graceMs;
    if (opts.remove !== undefined) req.remove = opts.remove;
    // The agent may wait out the whole grace period before answering.
    const deadline = Math.max(this.ch.longDeadlineMs, (graceMs ?? 0) + this.ch.deadlineMs);
    return containerFromProto((await unaryCall(this.ch, "StopContainer", req, deadline)) as WireContainer);
  }

  async getContainer(id: string): Promise<ContainerStatus> {
    return containerFromProto((await unaryCall(this.ch, "GetContainer", { id })) as WireContainer);
  }

  async listContainers(filter?: { labels?: Record<string, string> }): Promise<ContainerStatus[]> {
    const res = (await unaryCall(this.ch, "ListContainers", { labels: { ...filter?.labels } })) as {
      containers: WireContainer[];
    };
    return res.containers.map(containerFromProto);
  }

  async *streamLogs(
    id: string,
    opts: { follow?: boolean; tail?: number; signal?: AbortSignal } = {},
  ): AsyncGenerator<LogEntry> {
    const { signal } = opts;
    if (signal?.aborted) return;
    const req: { id: string; follow: boolean; tail?: number } = { id, follow: opts.follow ?? false };
    const tail = optionalUint(opts.tail, "tail", 0xffff_ffff);
    if (tail !== undefined) req.tail = tail;
    for await (const w of streamCall<WireLogEntry>(this.ch, "StreamLogs", req, { signal })) {
      yield logEntryFromProto(w);
    }
  }

  exec(id: string, req: ExecRequest): Promise<RpcExecSession> {
    return RpcExecSession.open(this.ch, id, req);
  }

  async pullImage(
    ref: string,
    opts: { credentials?: { username: string; password: string } } = {},
  ): Promise<ImageSummary> {
    const req = opts.credentials
      ? { ref, credentials: { username: opts.credentials.username, password: opts.credentials.password } }
      : { ref };
    return imageFromProto((await unaryCall(this.ch, "PullImage", req, this.ch.longDeadlineMs)) as WireImage);
  }

  async listImages(): Promise<ImageSummary[]> {
    const res = (await unaryCall(this.ch, "ListImages", {})) as { images: WireImage[] };
    return res.images.map(imageFromProto);
  }

  async removeImage(ref: string): Promise<void> {
    await unaryCall(this.ch, "RemoveImage", { ref }, this.ch.longDeadlineMs);
  }

  async importImage(req: ImportImageRequest): Promise<ImageSummary> {
    const wire = importRequestToProto(req);
    return imageFromProto(
      (await unaryCall(this.ch, "ImportImage", wire, this.ch.longDeadlineMs)) as WireImage,
    );
  }

  async gcImages(opts?: { unusedForMs?: number }): Promise<ImageGcResult> {
    const res = await unaryCall(this.ch, "GcImages", gcRequestToProto(opts), this.ch.longDeadlineMs);
    return gcResultFromProto(res as WireGcImagesResponse);
  }

  async setNetworkPolicy(id: string, policy: EgressPolicy): Promise<ContainerStatus> {
    const res = await unaryCall(this.ch, "SetNetworkPolicy", { id, egress: egressToProto(policy) });
    return containerFromProto(res as WireContainer);
  }

  async exposePort(id: string, port: number): Promise<ContainerStatus> {
    // uint32 on the wire: a negative or fractional port would arrive as another number.
    if (!Number.isInteger(port) || port < 1 || port > 65535) {
      const got = JSON.stringify(port);
      throw new BerthError("invalid_request", `port ${got} is not an integer 1..65535`, { field: "port" });
    }
    const res = await unaryCall(this.ch, "ExposePort", { id, port });
    return containerFromProto(res as WireContainer);
  }

  async hasCode(sha256: string): Promise<boolean> {
    const res = (await unaryCall(this.ch, "HasCode", { sha256 })) as { exists: boolean };
    return res.exists;
  }

  async putCode(sha256: string, data: AsyncIterable<Uint8Array>): Promise<void> {
    if (typeof sha256 !== "string" || sha256 === "") {
      throw new BerthError("invalid_request", "putCode needs the archive's sha256");
    }
    await uploadCall(this.ch, "PutCode", { sha256 }, data, PUT_CODE_CHUNK_BYTES);
  }
}
