// The two database engines the store-backed tests run on.

import { tempDir } from "./env.ts";
import { startTestPostgres } from "./postgres.ts";

export interface StoreEngine {
  name: "sqlite" | "postgres";
  /** The URL of a fresh, empty database, removed after `t`. */
  url(t: { after: (fn: () => unknown) => void }): Promise<string>;
}

export const STORE_ENGINES: StoreEngine[] = [
  { name: "sqlite", url: async (t) => `sqlite:${tempDir(t)}/berth.db` },
  { name: "postgres", url: async (t) => (await startTestPostgres(t)).url },
];
