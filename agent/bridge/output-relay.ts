// The agent's half of containers' Outputs (docs/outputs.md): a container's
// upload (the bridge's request body) goes to the coordinators in chunks over
// NATS, with the workspace the agent started the container for; URL and
// stat requests go as JSON. The container never names a workspace.

import type { NatsConnection } from "nats";
import { BerthError, isErrorCode } from "../../shared/errors.ts";
import {
  OUTPUT_CHUNK_BYTES,
  OUTPUT_HEADERS,
  type OutputCall,
  type OutputOp,
  type OutputReply,
  outputSubjects,
} from "../../shared/outputs.ts";

const REQUEST_TIMEOUT_MS = 30_000;

export class OutputRelayClient {
  constructor(
    private readonly nc: NatsConnection,
    private readonly agentId: string,
  ) {}

  private async request(
    ws: string,
    op: OutputOp,
    data: Uint8Array,
    more: Record<string, string> = {},
  ): Promise<Record<string, unknown>> {
    // Cached after the first call; nats stays unloaded on an agent without a coordinator.
    const { headers } = await import("nats");
    const h = headers();
    h.set(OUTPUT_HEADERS.op, op);
    h.set(OUTPUT_HEADERS.workspace, ws);
    for (const [k, v] of Object.entries(more)) h.set(k, v);
    let answer: Uint8Array;
    try {
      answer = (
        await this.nc.request(outputSubjects.request(this.agentId), data, {
          timeout: REQUEST_TIMEOUT_MS,
          headers: h,
        })
      ).data;
    } catch (e) {
      throw new BerthError(
        "unavailable",
        `no coordinator answered the output ${op} (${(e as Error).message})`,
      );
    }
    const reply = JSON.parse(new TextDecoder().decode(answer)) as OutputReply;
    if (reply.ok) {
      const { ok: _ok, ...rest } = reply;
      return rest;
    }
    throw new BerthError(isErrorCode(reply.error.code) ? reply.error.code : "internal", reply.error.message);
  }

  call(ws: string, op: "url" | "stat", body: OutputCall): Promise<Record<string, unknown>> {
    return this.request(ws, op, new TextEncoder().encode(JSON.stringify(body)));
  }

  /** Streams `body` to the coordinators as one output; returns its record. */
  async upload(
    ws: string,
    o: { name: string; taskId: string },
    body: AsyncIterable<Buffer>,
  ): Promise<Record<string, unknown>> {
    const { upload } = (await this.request(ws, "begin", new Uint8Array())) as { upload: string };
    let offset = 0;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    const flush = async () => {
      const chunk = Buffer.concat(pending, pendingBytes);
      pending = [];
      pendingBytes = 0;
      for (let at = 0; at < chunk.length; at += OUTPUT_CHUNK_BYTES) {
        const part = chunk.subarray(at, at + OUTPUT_CHUNK_BYTES);
        await this.request(ws, "chunk", part, {
          [OUTPUT_HEADERS.upload]: upload,
          [OUTPUT_HEADERS.offset]: String(offset),
        });
        offset += part.length;
      }
    };
    for await (const c of body) {
      pending.push(c);
      pendingBytes += c.length;
      if (pendingBytes >= OUTPUT_CHUNK_BYTES) await flush();
    }
    if (pendingBytes > 0) await flush();
    const call: OutputCall = { upload, name: o.name, task_id: o.taskId, size: offset };
    return this.request(ws, "commit", new TextEncoder().encode(JSON.stringify(call)));
  }
}
