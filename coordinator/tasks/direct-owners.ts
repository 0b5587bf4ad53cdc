// Which coordinator serves a direct task (an endpoint, ASGI or realtime
// request it proxies itself). The answer lives only in the serving process:
// when it dies the caller's connection dies with it and nobody will end the
// task, so a coordinator that starts ends the open direct tasks it finds
// (DirectTasks.failOrphans) — but with several coordinators, only those no
// live coordinator still serves. It asks them on a core subject
// (coordinator/streams/claims.ts) and waits a moment for their answers. The
// survivors ask the same question on a timer (coordinator/tasks/direct-orphans.ts),
// so a coordinator that stays dead leaves no request open either.

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { CLAIMS_WAIT_MS, ClusterClaims } from "../streams/index.ts";

/** Core NATS, coordinator → coordinators: "which of these direct task ids do you serve?" (a JSON array). */
export const DIRECT_TASKS_OWNED_SUBJECT = "berth.cluster.direct-tasks-owned";
/** How long a starting coordinator waits for the others' answers. */
export const DIRECT_OWNERS_WAIT_MS = CLAIMS_WAIT_MS;

export class DirectOwners extends ClusterClaims {
  constructor(nc: NatsConnection, owns: (taskId: string) => boolean, log: Logger) {
    super(nc, DIRECT_TASKS_OWNED_SUBJECT, owns, log);
  }

  /** The ids among `ids` that a live coordinator answered it serves, within `waitMs`. */
  async servedElsewhere(ids: string[], waitMs = DIRECT_OWNERS_WAIT_MS): Promise<Set<string>> {
    return (await this.ask(ids, waitMs)).claimed;
  }
}
