// Content-addressed blobs on the coordinator's disk:
// <dataDir>/objects/sha256/<first 2 hex>/<hex>. A blob is written to a
// temporary file while it is hashed and renamed into place only when the
// hash matches, so a reader never sees a partial or wrong blob.

import { createHash, randomBytes } from "node:crypto";
import { createReadStream, createWriteStream } from "node:fs";
import { mkdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { BerthError } from "../../shared/errors.ts";

export const MAX_OBJECT_BYTES = 256 * 1024 * 1024;
const SHA256_RE = /^[0-9a-f]{64}$/;

export function checkSha256(sha: string): string {
  if (!SHA256_RE.test(sha)) {
    throw new BerthError(
      "invalid_request",
      `object name ${JSON.stringify(sha)} is not a sha256 hex digest (64 lowercase hex characters)`,
    );
  }
  return sha;
}

export class BlobStore {
  readonly root: string;
  private readonly tmp: string;

  constructor(dataDir: string) {
    this.root = join(dataDir, "objects", "sha256");
    this.tmp = join(dataDir, "objects", "tmp");
  }

  pathOf(sha: string): string {
    checkSha256(sha);
    return join(this.root, sha.slice(0, 2), sha);
  }

  /** Size of the stored blob, or undefined when absent. */
  async size(sha: string): Promise<number | undefined> {
    try {
      return (await stat(this.pathOf(sha))).size;
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
      throw e;
    }
  }

  async has(sha: string): Promise<boolean> {
    return (await this.size(sha)) !== undefined;
  }

  /**
   * Stores the bytes of `source`; when `expectedSha` is given they must hash
   * to it. At most `maxBytes`. Returns the digest and size.
   */
  async put(
    source: AsyncIterable<Uint8Array> | Readable,
    expectedSha?: string,
    maxBytes = MAX_OBJECT_BYTES,
  ): Promise<{ sha256: string; size: number }> {
    if (expectedSha) checkSha256(expectedSha);
    await mkdir(this.tmp, { recursive: true });
    const tmpPath = join(this.tmp, `${randomBytes(8).toString("hex")}.part`);
    const hash = createHash("sha256");
    let size = 0;
    try {
      await pipeline(
        source,
        async function* (chunks: AsyncIterable<Uint8Array>) {
          for await (const c of chunks) {
            size += c.byteLength;
            if (size > maxBytes) {
              throw new BerthError(
                "object_too_large",
                `the object is larger than the ${maxBytes / 1024 / 1024} MiB limit`,
              );
            }
            hash.update(c);
            yield c;
          }
        },
        createWriteStream(tmpPath),
      );
      const sha256 = hash.digest("hex");
      if (expectedSha && sha256 !== expectedSha) {
        throw new BerthError(
          "object_hash_mismatch",
          `the uploaded bytes hash to ${sha256}, not ${expectedSha}`,
        );
      }
      const final = this.pathOf(sha256);
      await mkdir(join(this.root, sha256.slice(0, 2)), { recursive: true });
      await rename(tmpPath, final);
      return { sha256, size };
    } finally {
      await rm(tmpPath, { force: true });
    }
  }

  /** The blob's bytes as a stream; not_found when absent. */
  async open(sha: string): Promise<Readable> {
    if (!(await this.has(sha))) throw new BerthError("not_found", `object ${sha} not found`);
    return createReadStream(this.pathOf(sha));
  }
}
