// Containers' Outputs relayed by their agents (docs/outputs.md): one
// coordinator of the queue group answers each request (shared/outputs.ts).
// Chunks of one upload may reach different coordinators; each writes at its
// offset into the shared output directory, so none holds upload state.

import type { Msg, NatsConnection, Subscription } from "nats";
import { BerthError, describeError, isBerthError } from "../../shared/errors.ts";
import { OUTPUT_HEADERS, type OutputCall, type OutputReply, outputSubjects } from "../../shared/outputs.ts";
import { type OutputStore, publicView } from "./output-store.ts";

export interface OutputRelayLogger {
  error(obj: object, msg?: string): void;
}

export class OutputRelay {
  private sub?: Subscription;

  constructor(
    private readonly nc: NatsConnection,
    private readonly store: OutputStore,
    private readonly log: OutputRelayLogger,
  ) {}

  start(): void {
    this.sub = this.nc.subscribe(outputSubjects.allRequests, {
      queue: "berth-coordinators",
      callback: (err, msg) => {
        if (!err) void this.answer(msg);
      },
    });
  }

  stop(): void {
    this.sub?.unsubscribe();
  }

  private async handle(msg: Msg): Promise<Record<string, unknown>> {
    const h = (k: string) => msg.headers?.get(k) ?? "";
    const op = h(OUTPUT_HEADERS.op);
    const ws = h(OUTPUT_HEADERS.workspace);
    if (!ws) throw new BerthError("invalid_request", "a relayed output request without a workspace");
    if (op === "begin") return { upload: await this.store.begin(ws) };
    if (op === "chunk") {
      await this.store.write(ws, h(OUTPUT_HEADERS.upload), Number(h(OUTPUT_HEADERS.offset)), msg.data);
      return {};
    }
    const call = JSON.parse(new TextDecoder().decode(msg.data)) as OutputCall;
    switch (op) {
      case "commit": {
        const rec = await this.store.commit(ws, String(call.upload ?? ""), {
          name: String(call.name ?? ""),
          taskId: String(call.task_id ?? ""),
          size: Number(call.size),
        });
        return publicView(rec);
      }
      case "url":
        return this.store.publicUrl(ws, String(call.id ?? ""), Number(call.expires));
      case "stat":
        return publicView(await this.store.get(ws, String(call.id ?? "")));
      default:
        throw new BerthError("invalid_request", `unknown output operation ${JSON.stringify(op)}`);
    }
  }

  private async answer(msg: Msg): Promise<void> {
    let reply: OutputReply;
    try {
      reply = { ok: true, ...(await this.handle(msg)) };
    } catch (e) {
      if (isBerthError(e)) reply = { ok: false, error: { code: e.code, message: e.message } };
      else {
        this.log.error({ subject: msg.subject, err: describeError(e) }, "relayed output request failed");
        reply = { ok: false, error: { code: "internal", message: "the coordinator failed; see its log" } };
      }
    }
    if (msg.reply) msg.respond(new TextEncoder().encode(JSON.stringify(reply)));
  }
}
