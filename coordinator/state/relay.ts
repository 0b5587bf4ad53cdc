// Containers' Queue, Map and Signal operations, relayed by their agents
// (docs/queues.md): an agent sends a NATS request on berth.agent.<id>.state
// with the workspace of the container that asked; one coordinator of the
// queue group answers. Containers never reach NATS themselves, so the
// workspace is what the agent (which started the container) says.

import type { Msg, NatsConnection, Subscription } from "nats";
import { describeError, isBerthError } from "../../shared/errors.ts";
import { type RelayedStateReply, type RelayedStateRequest, stateSubjects } from "../../shared/objects.ts";
import type { StateObjects } from "./state.ts";

export interface RelayLogger {
  error(obj: object, msg?: string): void;
}

export class StateRelay {
  private sub?: Subscription;

  constructor(
    private readonly nc: NatsConnection,
    private readonly state: StateObjects,
    private readonly log: RelayLogger,
  ) {}

  start(): void {
    this.sub = this.nc.subscribe(stateSubjects.allRequests, {
      queue: "berth-coordinators",
      callback: (err, msg) => {
        if (!err) void this.answer(msg);
      },
    });
  }

  async stop(): Promise<void> {
    this.sub?.unsubscribe();
  }

  private async answer(msg: Msg): Promise<void> {
    let reply: RelayedStateReply;
    try {
      const req = JSON.parse(new TextDecoder().decode(msg.data)) as RelayedStateRequest;
      if (typeof req?.workspace_id !== "string" || req.workspace_id === "")
        throw Object.assign(new Error("a relayed state request without workspace_id"), { relay: true });
      reply = { ok: true, ...(await this.state.call(req.workspace_id, req)) };
    } catch (e) {
      if (isBerthError(e)) reply = { ok: false, error: { code: e.code, message: e.message } };
      else {
        this.log.error({ subject: msg.subject, err: describeError(e) }, "relayed state request failed");
        reply = { ok: false, error: { code: "internal", message: "the coordinator failed; see its log" } };
      }
    }
    if (msg.reply) msg.respond(new TextEncoder().encode(JSON.stringify(reply)));
  }
}
