// Map(name) on a JetStream key-value bucket (docs/queues.md): one bucket per
// workspace, berth_map_<ws>, keys `<map>.<k><base64url(key)>`. A KV key may
// only hold [-/_=.A-Za-z0-9], so user keys (any string) are encoded; the
// `k` keeps the empty key a non-empty token. Each write is one KV put, so
// concurrent writers of different keys never conflict; the last write of a
// key wins.

import type { KV, NatsConnection } from "nats";
import { BerthError } from "../../shared/errors.ts";
import { streamReplicas } from "../streams/index.ts";
import { checkObjectName, checkWorkspaceId, isJsNotFound, jsErrorText } from "./names.ts";

export interface MapLimits {
  /** Largest key, UTF-8 bytes. */
  maxKeyBytes: number;
  /** Largest value, pickled bytes. */
  maxValueBytes: number;
  /** All of a workspace's maps together (bytes). */
  maxWorkspaceBytes: number;
}

export const DEFAULT_MAP_LIMITS: MapLimits = {
  maxKeyBytes: 1024,
  maxValueBytes: 1024 * 1024,
  maxWorkspaceBytes: 1024 ** 3,
};

export interface MapInfo {
  name: string;
  size: number;
}

export const encodeMapKey = (key: string): string => `k${Buffer.from(key, "utf8").toString("base64url")}`;
export const decodeMapKey = (token: string): string =>
  Buffer.from(token.slice(1), "base64url").toString("utf8");

const bucketName = (ws: string) => `berth_map_${ws}`;

export class MapStore {
  readonly limits: MapLimits;
  private readonly buckets = new Map<string, Promise<KV>>();

  constructor(
    private readonly nc: NatsConnection,
    limits: Partial<MapLimits> = {},
  ) {
    this.limits = { ...DEFAULT_MAP_LIMITS, ...limits };
  }

  /** The workspace's bucket; created on first use (a read of a missing bucket creates it too, cheaply). */
  private bucket(ws: string): Promise<KV> {
    checkWorkspaceId(ws);
    let p = this.buckets.get(ws);
    if (!p) {
      p = this.nc.jetstream().views.kv(bucketName(ws), {
        history: 1,
        replicas: streamReplicas(this.nc),
        // JetStream counts the key and headers too; the value itself is checked in set.
        maxValueSize: this.limits.maxValueBytes + 4096,
        max_bytes: this.limits.maxWorkspaceBytes,
      });
      this.buckets.set(ws, p);
      p.catch(() => this.buckets.delete(ws));
    }
    return p;
  }

  private keyOf(name: string, key: unknown): string {
    checkObjectName("map", name);
    if (typeof key !== "string") throw new BerthError("invalid_request", `map ${name}: keys are strings`);
    const bytes = Buffer.byteLength(key, "utf8");
    if (bytes > this.limits.maxKeyBytes)
      throw new BerthError(
        "invalid_request",
        `map ${name}: a key of ${bytes} bytes is over the ${this.limits.maxKeyBytes}-byte key limit`,
      );
    return `${name}.${encodeMapKey(key)}`;
  }

  async set(ws: string, name: string, key: string, value: Uint8Array): Promise<void> {
    const k = this.keyOf(name, key);
    if (value.length > this.limits.maxValueBytes)
      throw new BerthError(
        "resource_exhausted",
        `map ${name}: a value of ${value.length} bytes is over the ${this.limits.maxValueBytes}-byte value limit`,
      );
    try {
      await (await this.bucket(ws)).put(k, value);
    } catch (e) {
      const t = jsErrorText(e);
      if (t.includes("maximum bytes"))
        throw new BerthError(
          "limit_exceeded",
          `map ${name}: the workspace's maps hold their limit of ${this.limits.maxWorkspaceBytes} bytes`,
        );
      if (t.includes("message size"))
        throw new BerthError("resource_exhausted", `map ${name}: the value is over the value limit`);
      throw e;
    }
  }

  /** The value, or undefined when the key is not in the map. */
  async get(ws: string, name: string, key: string): Promise<Uint8Array | undefined> {
    const k = this.keyOf(name, key);
    const e = await (await this.bucket(ws)).get(k);
    if (e?.operation !== "PUT") return undefined;
    return e.value;
  }

  /** Removes the key; false when it was not there. */
  async delete(ws: string, name: string, key: string): Promise<boolean> {
    const k = this.keyOf(name, key);
    const kv = await this.bucket(ws);
    const e = await kv.get(k);
    if (e?.operation !== "PUT") return false;
    await kv.purge(k);
    return true;
  }

  async keys(ws: string, name: string): Promise<string[]> {
    checkObjectName("map", name);
    const out: string[] = [];
    const it = await (await this.bucket(ws)).keys(`${name}.>`);
    for await (const k of it) out.push(decodeMapKey(k.slice(name.length + 1)));
    return out.sort();
  }

  /** Every key and value, read in one pass over the bucket. */
  async items(ws: string, name: string): Promise<[string, Uint8Array][]> {
    checkObjectName("map", name);
    const kv = await this.bucket(ws);
    const out: [string, Uint8Array][] = [];
    // The watcher ends once it has handed over every key's current value.
    let stop = false;
    const w = await kv.watch({
      key: `${name}.>`,
      ignoreDeletes: true,
      initializedFn: () => {
        stop = true;
      },
    });
    if (stop) w.stop();
    for await (const e of w) {
      if (e.operation === "PUT") out.push([decodeMapKey(e.key.slice(name.length + 1)), e.value]);
      if (e.delta === 0 || stop) break;
    }
    w.stop();
    return out.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  async size(ws: string, name: string): Promise<number> {
    return (await this.keys(ws, name)).length;
  }

  /** The workspace's non-empty maps with their key counts. */
  async list(ws: string): Promise<MapInfo[]> {
    const counts = new Map<string, number>();
    const it = await (await this.bucket(ws)).keys();
    for await (const k of it) {
      const name = k.slice(0, k.indexOf("."));
      counts.set(name, (counts.get(name) ?? 0) + 1);
    }
    return [...counts].map(([name, size]) => ({ name, size })).sort((a, b) => a.name.localeCompare(b.name));
  }

  /** Removes every key of the map; not_found when it has none. */
  async deleteMap(ws: string, name: string): Promise<number> {
    const n = await this.size(ws, name);
    if (n === 0) throw new BerthError("not_found", `map ${name} not found`);
    const jsm = await this.nc.jetstreamManager();
    try {
      await jsm.streams.purge(`KV_${bucketName(ws)}`, { filter: `$KV.${bucketName(ws)}.${name}.>` });
    } catch (e) {
      if (!isJsNotFound(e)) throw e;
    }
    return n;
  }
}
