// One entry for Queue, Map and Signal operations (shared/objects.ts): the
// SDK's gateway route and the agents' relay (./relay-ops.ts) both call
// `call` with the workspace they vouch for. Values travel base64; their
// bytes are pickles the coordinator never opens.

import { BerthError } from "../../shared/errors.ts";
import { MAX_SIGNAL_WAIT_MS, STATE_OPS, type StateOp, type StateRequest } from "../../shared/objects.ts";
import type { RelayedCall } from "../streams/index.ts";
import type { MapStore } from "./maps.ts";
import type { QueueStore } from "./queues.ts";
import type { SignalStore } from "./signals.ts";

/** How much map.items hands over per page (the relay's NATS messages stay under max_payload). */
export const ITEMS_PAGE_BYTES = 4 * 1024 * 1024;

const b64 = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString("base64");

function bytesOf(r: StateRequest): Uint8Array {
  if (typeof r.value !== "string")
    throw new BerthError("invalid_request", `${r.op} needs value (base64 bytes)`);
  return Buffer.from(r.value, "base64");
}

function keyOf(r: StateRequest): string {
  if (typeof r.key !== "string") throw new BerthError("invalid_request", `${r.op} needs key (a string)`);
  return r.key;
}

function nameOf(r: StateRequest): string {
  if (typeof r.name !== "string") throw new BerthError("invalid_request", `${r.op} needs name`);
  return r.name;
}

/** The ops of the state wire another area serves (a bot's model.chat). */
export type ForeignStateOp = Extract<StateOp, "model.chat">;
/** The ops this area serves itself. */
export type OwnStateOp = Exclude<StateOp, ForeignStateOp>;
export const OWN_STATE_OPS = STATE_OPS.filter((op): op is OwnStateOp => op !== "model.chat");

/** Where the state wire's other ops are answered: the relay router, whose handlers the other areas registered. */
export interface ForeignStateOps {
  dispatch(call: RelayedCall): Promise<Record<string, unknown>>;
}

export class StateObjects {
  constructor(
    readonly queues: QueueStore,
    readonly maps: MapStore,
    readonly signals: SignalStore,
    private readonly o: {
      /** map.items page size (tests make it small). */
      itemsPageBytes?: number;
      /** So the SDK's gateway route answers every op the agents' relay does. */
      foreign?: ForeignStateOps;
    } = {},
  ) {}

  async call(ws: string, r: StateRequest, abort?: AbortSignal): Promise<Record<string, unknown>> {
    if (!r || typeof r !== "object" || !(STATE_OPS as readonly string[]).includes(r.op))
      throw new BerthError("invalid_request", `op must be one of ${STATE_OPS.join(", ")}`);
    switch (r.op) {
      case "model.chat": {
        const foreign = this.o.foreign;
        if (!foreign) throw new BerthError("unavailable", `this coordinator does not serve ${r.op}`);
        const json = { ...r } as Record<string, unknown>;
        return foreign.dispatch({
          op: r.op,
          workspaceId: ws,
          json: () => json,
          data: new Uint8Array(),
          header: () => "",
        });
      }
      case "queue.put":
        await this.queues.put(ws, nameOf(r), bytesOf(r));
        return {};
      case "queue.pop": {
        const v = await this.queues.pop(ws, nameOf(r));
        return { value: v === undefined ? null : b64(v) };
      }
      case "queue.size":
        return { size: await this.queues.size(ws, nameOf(r)) };
      case "map.set":
        await this.maps.set(ws, nameOf(r), keyOf(r), bytesOf(r));
        return {};
      case "map.get": {
        const v = await this.maps.get(ws, nameOf(r), keyOf(r));
        return { value: v === undefined ? null : b64(v) };
      }
      case "map.delete":
        return { deleted: await this.maps.delete(ws, nameOf(r), keyOf(r)) };
      case "map.keys":
        return { keys: await this.maps.keys(ws, nameOf(r)) };
      case "map.size":
        return { size: await this.maps.size(ws, nameOf(r)) };
      case "map.items":
        return this.itemsPage(ws, nameOf(r), r.after);
      case "signal.set": {
        const s = await this.signals.set(ws, nameOf(r), r.ttl ?? undefined);
        return { signal: s };
      }
      case "signal.clear":
        return { cleared: await this.signals.clear(ws, nameOf(r)) };
      case "signal.state":
        return { signal: await this.signals.state(ws, nameOf(r)) };
      case "signal.wait": {
        const waitMs = Math.min(
          Math.max(0, Number(r.wait_ms ?? MAX_SIGNAL_WAIT_MS) || 0),
          MAX_SIGNAL_WAIT_MS,
        );
        const seen = r.seen && typeof r.seen === "object" ? r.seen : {};
        return { fired: await this.signals.wait(ws, r.names ?? [], seen, waitMs, abort) };
      }
    }
  }

  /** Items in key order after `after`, up to ITEMS_PAGE_BYTES; `next` is where the next page starts. */
  private async itemsPage(
    ws: string,
    name: string,
    after: string | undefined,
  ): Promise<Record<string, unknown>> {
    const all = await this.maps.items(ws, name);
    const items: [string, string][] = [];
    let bytes = 0;
    for (const [k, v] of all) {
      if (after !== undefined && k <= after) continue;
      if (items.length > 0 && bytes + v.length + k.length > (this.o.itemsPageBytes ?? ITEMS_PAGE_BYTES))
        return { items, next: items[items.length - 1]?.[0] };
      items.push([k, b64(v)]);
      bytes += v.length + k.length;
    }
    return { items, next: null };
  }
}
