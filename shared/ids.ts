import { createHash, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";

// Crockford base32 keeps ids short, case-insensitive and free of look-alikes.
const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz";

function base32(bytes: Buffer): string {
  let out = "";
  let bits = 0;
  let value = 0;
  for (const b of bytes) {
    value = (value << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += ALPHABET[(value >>> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += ALPHABET[(value << (5 - bits)) & 31];
  return out;
}

export type IdKind =
  | "ws"
  | "tok"
  | "agent"
  | "stub"
  | "task"
  | "ctr"
  | "dep"
  | "app"
  | "wh"
  | "evt"
  | "img"
  | "snap"
  | "db"
  | "aud"
  | "ses";

/**
 * 80 random bits from a v4 UUID's 122: randomUUID draws on Node's batched
 * entropy cache, where randomBytes(10) is a call into OpenSSL per id (an
 * endpoint request makes several ids, and that showed in its profile). The
 * version nibble (hex 12) and the variant bits (hex 16) are skipped.
 */
function idBytes(): Buffer {
  const hex = randomUUID().replace(/-/g, "");
  return Buffer.from(hex.slice(0, 12) + hex.slice(13, 16) + hex.slice(17, 22), "hex");
}

/** Opaque id with a kind prefix, e.g. `ws-9x2k...`. 80 random bits. */
export function newId(kind: IdKind): string {
  return `${kind}-${base32(idBytes())}`;
}

export function hasKind(id: string, kind: IdKind): boolean {
  return id.startsWith(`${kind}-`);
}

/** A secret token with a recognisable prefix; 256 random bits. */
export function newSecret(prefix: string): string {
  return `${prefix}${randomBytes(32).toString("base64url")}`;
}

/** Tokens are high-entropy, so a plain SHA-256 is a sound at-rest form. */
export function hashSecret(secret: string): string {
  return createHash("sha256").update(secret).digest("hex");
}

export function safeEqual(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}
