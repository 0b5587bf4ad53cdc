// Reading what a JetStream stream holds (event history, log pages) through a
// short-lived consumer of its own: in memory, no acks, deleted when done.

import { AckPolicy, type DeliverPolicy, type JetStreamClient, type JsMsg, type NatsConnection } from "nats";

export interface ScanStart {
  deliver_policy: DeliverPolicy;
  opt_start_seq?: number;
  opt_start_time?: string;
}

/** Nanoseconds: a consumer left behind by a crash removes itself after 30 s. */
const SCAN_INACTIVE_THRESHOLD = 30_000_000_000;
/** Messages one fetch asks for at most. */
const SCAN_FETCH_MAX = 256;

/**
 * Reads the stored messages of `stream` that match `filter`, in order from
 * `start`, until `visit` returns false or none are left. `pending` is how
 * many more match after this one.
 */
export async function scanStored(
  nats: { nc: NatsConnection; js: JetStreamClient },
  stream: string,
  filter: string,
  start: ScanStart,
  visit: (m: JsMsg, pending: number) => boolean,
): Promise<void> {
  const jsm = await nats.nc.jetstreamManager();
  const info = await jsm.consumers.add(stream, {
    filter_subject: filter,
    ack_policy: AckPolicy.None,
    mem_storage: true,
    inactive_threshold: SCAN_INACTIVE_THRESHOLD,
    ...start,
  });
  try {
    let pending = info.num_pending;
    const consumer = await nats.js.consumers.get(stream, info.config.name ?? info.name);
    while (pending > 0) {
      // Only as many as are stored, so the fetch ends as soon as they came.
      const batch = await consumer.fetch({ max_messages: Math.min(pending, SCAN_FETCH_MAX), expires: 5000 });
      let got = 0;
      let stop = false;
      for await (const m of batch) {
        got++;
        pending = m.info.pending;
        // Leaving the loop ends the fetch (closing it from inside would wait on this loop).
        if (!visit(m, pending)) {
          stop = true;
          break;
        }
      }
      if (stop || got === 0) return; // got 0: they aged out meanwhile
    }
  } finally {
    await jsm.consumers.delete(stream, info.name).catch(() => {});
  }
}
