import { randomBytes } from "node:crypto";
import { type SecretKey, SecretService, secretKeyFromBytes } from "../../coordinator/secrets/index.ts";
import type { Store } from "../../coordinator/store/store.ts";
import { tempDir } from "../helpers/env.ts";
import { startTestPostgres } from "../helpers/postgres.ts";

type Hooks = { after: (fn: () => unknown) => void };

/** The store test's engines: every secrets suite that touches the store runs on both. */
export const ENGINES: { name: string; url: (t: Hooks) => Promise<string> }[] = [
  { name: "sqlite", url: async (t) => `sqlite:${tempDir(t)}/berth.db` },
  { name: "postgres", url: async (t) => (await startTestPostgres(t)).url },
];

export const randomKey = (source = "test key"): SecretKey => secretKeyFromBytes(randomBytes(32), source);

export const secretService = (store: Store, key: SecretKey = randomKey()) =>
  new SecretService({ db: store.db, key });
