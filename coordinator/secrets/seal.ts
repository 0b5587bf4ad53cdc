// AES-256-GCM for one secret value. The workspace id and the name are the
// additional authenticated data, so a sealed value copied to another row
// (another name or workspace) fails to open instead of leaking there.

import { createCipheriv, createDecipheriv, randomBytes } from "node:crypto";
import type { SecretKey } from "./key.ts";

const NONCE_BYTES = 12;
const TAG_BYTES = 16;

export interface Sealed {
  /** Encrypted bytes followed by the GCM tag. */
  ciphertext: Buffer;
  nonce: Buffer;
  keyId: string;
}

/** NUL cannot occur in a workspace id or a secret name, so the pair reads back one way only. */
const aad = (workspaceId: string, name: string) =>
  Buffer.from(`berth-secret\0${workspaceId}\0${name}`, "utf8");

export function seal(key: SecretKey, workspaceId: string, name: string, value: string): Sealed {
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv("aes-256-gcm", key.bytes, nonce, { authTagLength: TAG_BYTES });
  cipher.setAAD(aad(workspaceId, name));
  const body = Buffer.concat([cipher.update(value, "utf8"), cipher.final()]);
  return { ciphertext: Buffer.concat([body, cipher.getAuthTag()]), nonce, keyId: key.id };
}

/** The value, or undefined when this key (or this row) does not authenticate it. */
export function open(
  key: SecretKey,
  workspaceId: string,
  name: string,
  sealed: { ciphertext: Uint8Array; nonce: Uint8Array },
): string | undefined {
  const ct = Buffer.from(sealed.ciphertext);
  if (ct.length < TAG_BYTES || sealed.nonce.length !== NONCE_BYTES) return undefined;
  try {
    const decipher = createDecipheriv("aes-256-gcm", key.bytes, Buffer.from(sealed.nonce), {
      authTagLength: TAG_BYTES,
    });
    decipher.setAAD(aad(workspaceId, name));
    decipher.setAuthTag(ct.subarray(ct.length - TAG_BYTES));
    return Buffer.concat([decipher.update(ct.subarray(0, ct.length - TAG_BYTES)), decipher.final()]).toString(
      "utf8",
    );
  } catch {
    return undefined;
  }
}
