// The agent's half of containers' Queue, Map and Signal operations
// (docs/queues.md): the bridge hands over a container's request, this adds
// the workspace the agent started that container for and asks the
// coordinators over NATS (shared/objects.ts). The container cannot name
// another workspace: it never sends one.

import type { NatsConnection } from "nats";
import { BerthError, isErrorCode } from "../../shared/errors.ts";
import {
  MAX_MODEL_CALL_MS,
  MAX_SIGNAL_WAIT_MS,
  type RelayedStateReply,
  type StateRequest,
  stateSubjects,
} from "../../shared/objects.ts";

/** How long an operation may take before the container hears `unavailable` (a signal wait adds its wait). */
const REQUEST_TIMEOUT_MS = 30_000;

export class StateRelayClient {
  constructor(
    private readonly nc: NatsConnection,
    private readonly agentId: string,
  ) {}

  async call(workspaceId: string, req: StateRequest): Promise<Record<string, unknown>> {
    if (!req || typeof req !== "object" || typeof req.op !== "string")
      throw new BerthError("invalid_request", "a state request is {op, name, ...}");
    // A bot's model call may wait for its model to start (scaled to zero): it gets the longer bound.
    const waitMs =
      req.op === "signal.wait"
        ? Math.min(Number(req.wait_ms ?? 0) || 0, MAX_SIGNAL_WAIT_MS)
        : req.op === "model.chat"
          ? MAX_MODEL_CALL_MS
          : 0;
    const body = JSON.stringify({ ...req, workspace_id: workspaceId });
    let data: Uint8Array;
    try {
      const m = await this.nc.request(stateSubjects.request(this.agentId), new TextEncoder().encode(body), {
        timeout: REQUEST_TIMEOUT_MS + waitMs,
      });
      data = m.data;
    } catch (e) {
      throw new BerthError(
        "unavailable",
        `no coordinator answered the ${req.op} request (${(e as Error).message}); ask again`,
      );
    }
    const reply = JSON.parse(new TextDecoder().decode(data)) as RelayedStateReply;
    if (reply.ok) {
      const { ok: _ok, ...rest } = reply;
      return rest;
    }
    const code = isErrorCode(reply.error.code) ? reply.error.code : "internal";
    throw new BerthError(code, reply.error.message);
  }
}
