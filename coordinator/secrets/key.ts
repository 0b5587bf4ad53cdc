// The key that seals workspace secrets. It lives outside the database: in a
// key file (made on first start) or in BERTH_SECRETS_KEY, so a copy of the
// store alone reveals no secret.

import { createHmac, randomBytes } from "node:crypto";
import { chmodSync, existsSync, linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { BerthError, describeError } from "../../shared/errors.ts";

export const SECRET_KEY_BYTES = 32;
/** The environment variable that carries the key (base64 of 32 bytes); it wins over the key file. */
export const SECRET_KEY_ENV = "BERTH_SECRETS_KEY";

export interface SecretKey {
  /** 32 bytes for AES-256-GCM. */
  readonly bytes: Buffer;
  /** Fingerprint stored beside each sealed row, so a wrong key is named as such. */
  readonly id: string;
  /** Where the key came from, for messages: the file path or the variable name. */
  readonly source: string;
}

/** An HMAC of a fixed label under the key: tells keys apart without revealing them. */
export function keyFingerprint(bytes: Buffer): string {
  return `k1-${createHmac("sha256", bytes).update("berth secrets key id").digest("hex").slice(0, 16)}`;
}

export function secretKeyFromBytes(bytes: Buffer, source: string): SecretKey {
  if (bytes.length !== SECRET_KEY_BYTES) {
    throw new BerthError(
      "invalid_request",
      `the secrets key from ${source} is ${bytes.length} bytes; it must be exactly ${SECRET_KEY_BYTES}`,
    );
  }
  return { bytes: Buffer.from(bytes), id: keyFingerprint(bytes), source };
}

/** A key given as base64 text (BERTH_SECRETS_KEY, or a key file written as text). */
export function secretKeyFromBase64(text: string, source: string): SecretKey {
  const t = text.trim();
  if (!/^[A-Za-z0-9+/_-]+={0,2}$/.test(t)) {
    throw new BerthError(
      "invalid_request",
      `the secrets key from ${source} is not base64 (expected base64 of ${SECRET_KEY_BYTES} bytes)`,
    );
  }
  return secretKeyFromBytes(
    Buffer.from(t, t.includes("-") || t.includes("_") ? "base64url" : "base64"),
    source,
  );
}

export interface LoadSecretKeyOptions {
  /** Key file: 32 raw bytes, or their base64 text. Created (0600, directory 0700) when absent. */
  file: string;
  /** The value of BERTH_SECRETS_KEY, when set; wins over the file (which is then neither read nor made). */
  fromEnv?: string | undefined;
}

/**
 * The coordinator's secrets key. Every coordinator sharing a store needs the
 * same key; a first start with neither the variable nor the file makes a new
 * random key file.
 */
export function loadSecretKey(o: LoadSecretKeyOptions): SecretKey {
  if (o.fromEnv !== undefined && o.fromEnv.trim() !== "")
    return secretKeyFromBase64(o.fromEnv, SECRET_KEY_ENV);
  if (!existsSync(o.file)) createKeyFile(o.file);
  let raw: Buffer;
  try {
    raw = readFileSync(o.file);
  } catch (e) {
    throw new BerthError("unavailable", `cannot read the secrets key file ${o.file}: ${describeError(e)}`);
  }
  return raw.length === SECRET_KEY_BYTES
    ? secretKeyFromBytes(raw, o.file)
    : secretKeyFromBase64(raw.toString("latin1"), o.file);
}

function createKeyFile(file: string): void {
  const dir = dirname(file);
  const tmp = `${file}.${process.pid}.tmp`;
  try {
    if (!existsSync(dir)) {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      chmodSync(dir, 0o700); // the umask may have narrowed mkdir's mode; make it exact
    }
    writeFileSync(tmp, randomBytes(SECRET_KEY_BYTES), { mode: 0o600 });
    // link() never replaces: of two coordinators starting on one data directory,
    // one key wins whole and the other reads it.
    linkSync(tmp, file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") {
      throw new BerthError("unavailable", `cannot create the secrets key file ${file}: ${describeError(e)}`);
    }
  } finally {
    rmSync(tmp, { force: true });
  }
}
