import { type JetStreamManager, RetentionPolicy, StorageType } from "nats";
import { streams } from "../../shared/subjects.ts";

export interface StreamRetention {
  /** @default 7 days */
  logsMaxAgeMs?: number;
  /** @default 1 GiB */
  logsMaxBytes?: number;
  /** Container events and workspace events (BERTH_EVENTS, docs/events.md). @default 30 days */
  eventsMaxAgeMs?: number;
  /** Workspace events (BERTH_EVENTS). @default 1 GiB */
  eventsMaxBytes?: number;
}

const ns = (ms: number) => ms * 1_000_000;

/** Creates berth's JetStream streams, or updates their retention to what the operator set. */
/** `replicas`: copies of each stream (coordinator/streams/replicas.ts). */
export async function ensureStreams(
  jsm: JetStreamManager,
  r: StreamRetention = {},
  replicas = 1,
): Promise<void> {
  const wanted = [
    {
      name: streams.logs.name,
      subjects: [...streams.logs.subjects],
      max_age: ns(r.logsMaxAgeMs ?? 7 * 86_400_000),
      max_bytes: r.logsMaxBytes ?? 1024 ** 3,
    },
    {
      name: streams.containerEvents.name,
      subjects: [...streams.containerEvents.subjects],
      max_age: ns(r.eventsMaxAgeMs ?? 30 * 86_400_000),
      max_bytes: -1,
    },
  ];
  for (const cfg of wanted) {
    const full = {
      ...cfg,
      retention: RetentionPolicy.Limits,
      storage: StorageType.File,
      num_replicas: replicas,
    };
    try {
      await jsm.streams.info(cfg.name);
      await jsm.streams.update(cfg.name, {
        subjects: full.subjects,
        max_age: full.max_age,
        max_bytes: full.max_bytes,
      });
    } catch (e) {
      if ((e as { code?: string }).code !== "404" && !/stream not found/i.test((e as Error).message)) throw e;
      await jsm.streams.add(full);
    }
  }
}
