// Shared by the files and snapshot suites: a real container host (test/host's
// harness: registry pull, runc, network), a sleeping container, and helpers
// to run commands in it and to stream bytes.

import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import type { ContainerApi } from "../../api/index.ts";
import { execAll } from "../host/harness.ts";

export const SLEEP = ["python3", "-c", "import time; time.sleep(600)"];

/** Runs `sh -c script` in the container; fails the test on a non-zero exit. */
export async function sh(api: ContainerApi, id: string, script: string): Promise<string> {
  const r = await execAll(await api.exec(id, { args: ["sh", "-c", script] }));
  assert.equal(r.code, 0, `sh -c ${script}: ${r.stderr}`);
  return r.stdout;
}

/** `total` pseudo-random bytes in chunks of `chunk`, and their sha256 once consumed. */
export function randomStream(
  total: number,
  chunk = 1024 * 1024,
): { data: AsyncIterable<Uint8Array>; sha256: () => string } {
  const hash = createHash("sha256");
  async function* data() {
    for (let sent = 0; sent < total; sent += chunk) {
      const part = randomBytes(Math.min(chunk, total - sent));
      hash.update(part);
      yield part;
    }
  }
  let digest: string | undefined;
  return { data: data(), sha256: () => (digest ??= hash.digest("hex")) };
}

export async function drain(
  it: AsyncIterable<Uint8Array>,
): Promise<{ sha256: string; size: number; maxChunk: number }> {
  const hash = createHash("sha256");
  let size = 0;
  let maxChunk = 0;
  for await (const c of it) {
    hash.update(c);
    size += c.byteLength;
    maxChunk = Math.max(maxChunk, c.byteLength);
  }
  return { sha256: hash.digest("hex"), size, maxChunk };
}

export async function* bytesOf(s: string): AsyncGenerator<Uint8Array> {
  yield new TextEncoder().encode(s);
}

export async function textOf(it: AsyncIterable<Uint8Array>): Promise<string> {
  const parts: Uint8Array[] = [];
  for await (const c of it) parts.push(c);
  return Buffer.concat(parts).toString("utf8");
}

/** Asserts a rejection with this berth error code, naming `path` in the message and details when given. */
export const rejectsWith = (code: string, path?: string) => (e: unknown) => {
  const err = e as { code?: string; message?: string; details?: { path?: string } };
  assert.equal(err.code, code, err.message);
  if (path !== undefined) {
    assert.ok(err.message?.includes(path), `message names ${path}: ${err.message}`);
    assert.equal(err.details?.path, path);
  }
  return true;
};
