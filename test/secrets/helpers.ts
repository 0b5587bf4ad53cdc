import { randomBytes } from "node:crypto";
import { type SecretKey, SecretService, secretKeyFromBytes } from "../../coordinator/secrets/index.ts";
import type { Store } from "../../coordinator/records.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";

/** Every secrets suite that touches the store runs on both engines. */
export const ENGINES = STORE_ENGINES;

export const randomKey = (source = "test key"): SecretKey => secretKeyFromBytes(randomBytes(32), source);

export const secretService = (store: Store, key: SecretKey = randomKey()) =>
  new SecretService({ db: store.db, key });
