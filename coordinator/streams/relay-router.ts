// Containers' calls through their agents (docs/queues.md, docs/outputs.md,
// docs/bots.md): Queue, Map, Signal, Output and a bot's model.chat reach the
// coordinators as NATS requests of the container's agent, which adds the
// workspace it started the container for (containers never reach NATS, so
// that workspace is the agent's word). One router answers them all: it
// subscribes to each wire's subject in the coordinators' queue group (one
// coordinator answers each request), decodes the request, runs the handler
// the op's area registered, and answers a failure through the public error
// edge, so an internal error reaches the container as an error id and its
// detail only the log.
//
// Two wires, as the agent sends them (agent/bridge/state-relay.ts,
// output-relay.ts): the state wire is one JSON object `{op, workspace_id,
// ...}` (shared/objects.ts); the output wire names its op and workspace in
// headers and carries raw bytes (a chunk) or JSON (shared/outputs.ts), and
// its ops are routed here as `output.<op>`. Both answer `{ok: true, ...}` or
// `{ok: false, error: {code, message}}`.

import type { Msg, NatsConnection, Subscription } from "nats";
import { BerthError } from "../../shared/errors.ts";
import { STATE_OPS, stateSubjects } from "../../shared/objects.ts";
import { OUTPUT_HEADERS, type OutputOp, outputSubjects } from "../../shared/outputs.ts";
import { publicError } from "../http/index.ts";

/** One decoded request. */
export interface RelayedCall {
  op: string;
  /** The workspace the agent started the asking container for. */
  workspaceId: string;
  /** The request's JSON object: the state wire's whole request, the output wire's body (commit, url, stat). */
  json(): Record<string, unknown>;
  /** The raw payload (an output chunk's bytes). */
  data: Uint8Array;
  /** A header of the request ("" when absent): the output wire's upload and offset. */
  header(name: string): string;
}

/** Answers one op: the fields beside `ok: true`; throws to refuse. */
export type RelayHandler = (call: RelayedCall) => Promise<Record<string, unknown>>;

export interface RelayLog {
  error(obj: object, msg: string): void;
}

/** The coordinators' queue group: one of them answers each request. */
const QUEUE_GROUP = "berth-coordinators";

interface RelayWire {
  subject: string;
  decode(msg: Msg): RelayedCall;
}

const headerOf = (msg: Msg) => (name: string) => msg.headers?.get(name) ?? "";

function jsonOf(data: Uint8Array): Record<string, unknown> {
  // Not JSON from an agent is a fault of the agent, not of the container: internal, detail in the log.
  return JSON.parse(new TextDecoder().decode(data)) as Record<string, unknown>;
}

const STATE_WIRE: RelayWire = {
  subject: stateSubjects.allRequests,
  decode(msg) {
    const req = jsonOf(msg.data);
    if (typeof req?.workspace_id !== "string" || req.workspace_id === "")
      throw new Error("a relayed state request without workspace_id");
    if (!(STATE_OPS as readonly unknown[]).includes(req.op))
      throw new BerthError("invalid_request", `op must be one of ${STATE_OPS.join(", ")}`);
    return {
      op: req.op as string,
      workspaceId: req.workspace_id,
      json: () => req,
      data: msg.data,
      header: headerOf(msg),
    };
  },
};

const OUTPUT_OPS: readonly OutputOp[] = ["begin", "chunk", "commit", "url", "stat"];

const OUTPUT_WIRE: RelayWire = {
  subject: outputSubjects.allRequests,
  decode(msg) {
    const header = headerOf(msg);
    const op = header(OUTPUT_HEADERS.op);
    const ws = header(OUTPUT_HEADERS.workspace);
    if (!ws) throw new BerthError("invalid_request", "a relayed output request without a workspace");
    if (!(OUTPUT_OPS as readonly string[]).includes(op))
      throw new BerthError("invalid_request", `unknown output operation ${JSON.stringify(op)}`);
    return { op: `output.${op}`, workspaceId: ws, json: () => jsonOf(msg.data), data: msg.data, header };
  },
};

export class RelayRouter {
  private readonly handlers = new Map<string, RelayHandler>();
  private readonly wires: readonly RelayWire[] = [STATE_WIRE, OUTPUT_WIRE];
  private subs: Subscription[] = [];

  constructor(
    private readonly nc: NatsConnection,
    private readonly log: RelayLog,
  ) {}

  /** Registers the handler of `op` (an area's own ops, before start()). */
  serve(op: string, handler: RelayHandler): void {
    if (this.handlers.has(op)) throw new Error(`relay op ${op} is served twice`);
    this.handlers.set(op, handler);
  }

  /** Answers `call` with its op's handler; refuses an op no area serves on this coordinator. */
  async dispatch(call: RelayedCall): Promise<Record<string, unknown>> {
    const handler = this.handlers.get(call.op);
    if (!handler) throw new BerthError("unavailable", `this coordinator does not serve ${call.op}`);
    return handler(call);
  }

  start(): void {
    for (const wire of this.wires) {
      this.subs.push(
        this.nc.subscribe(wire.subject, {
          queue: QUEUE_GROUP,
          callback: (err, msg) => {
            if (!err) void this.answer(wire, msg);
          },
        }),
      );
    }
  }

  async stop(): Promise<void> {
    for (const sub of this.subs) sub.unsubscribe();
    this.subs = [];
  }

  private async answer(wire: RelayWire, msg: Msg): Promise<void> {
    let reply: Record<string, unknown>;
    let op: string | undefined;
    try {
      const call = wire.decode(msg);
      op = call.op;
      reply = { ok: true, ...(await this.dispatch(call)) };
    } catch (e) {
      const pe = publicError(e, {
        log: this.log,
        what: "relayed request failed",
        context: { subject: msg.subject, ...(op ? { op } : {}) },
      });
      reply = { ok: false, error: { code: pe.error.code, message: pe.error.message } };
    }
    if (msg.reply) msg.respond(new TextEncoder().encode(JSON.stringify(reply)));
  }
}
