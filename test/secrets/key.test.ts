// The secrets key: made on first start (0600 in a 0700 directory), read back
// the same, BERTH_SECRETS_KEY wins, and bad keys fail with the cause.

import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { loadSecretKey } from "../../coordinator/secrets/index.ts";
import { resolveCoordinatorOptions } from "../../coordinator/options.ts";
import { tempDir } from "../helpers/env.ts";

test("first load makes a 32-byte key file, 0600 in a 0700 directory; later loads read the same key", (t) => {
  const dir = tempDir(t);
  const file = join(dir, "keys", "secrets.key");
  const k = loadSecretKey({ file });
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.equal(statSync(join(dir, "keys")).mode & 0o777, 0o700);
  assert.equal(readFileSync(file).length, 32);
  assert.deepEqual(readFileSync(file), k.bytes);
  assert.match(k.id, /^k1-[0-9a-f]{16}$/);
  assert.equal(k.source, file);
  const again = loadSecretKey({ file });
  assert.deepEqual(again.bytes, k.bytes);
  assert.equal(again.id, k.id);
  const other = loadSecretKey({ file: join(dir, "elsewhere", "secrets.key") });
  assert.notEqual(other.id, k.id, "a new key has another id");
});

test("BERTH_SECRETS_KEY wins over the file, which is then not made", (t) => {
  const dir = tempDir(t);
  const bytes = randomBytes(32);
  const file = join(dir, "keys", "secrets.key");
  const k = loadSecretKey({ file, fromEnv: `${bytes.toString("base64")}\n` });
  assert.deepEqual(k.bytes, bytes);
  assert.equal(k.source, "BERTH_SECRETS_KEY");
  assert.equal(existsSync(file), false);
  // An existing file is ignored too.
  loadSecretKey({ file });
  assert.deepEqual(loadSecretKey({ file, fromEnv: bytes.toString("base64url") }).bytes, bytes);
  // Set but empty: the file.
  assert.deepEqual(loadSecretKey({ file, fromEnv: "" }).bytes, readFileSync(file));
});

test("a key file may hold base64 text, so it can be pasted from BERTH_SECRETS_KEY", (t) => {
  const dir = tempDir(t);
  const bytes = randomBytes(32);
  const file = join(dir, "secrets.key");
  writeFileSync(file, `${bytes.toString("base64")}\n`, { mode: 0o600 });
  assert.deepEqual(loadSecretKey({ file }).bytes, bytes);
});

test("keys of the wrong size or not base64 fail naming where they came from", (t) => {
  const dir = tempDir(t);
  assert.throws(() => loadSecretKey({ file: join(dir, "x"), fromEnv: randomBytes(16).toString("base64") }), {
    code: "invalid_request",
    message: "the secrets key from BERTH_SECRETS_KEY is 16 bytes; it must be exactly 32",
  });
  assert.throws(() => loadSecretKey({ file: join(dir, "x"), fromEnv: "not base64 at all!" }), {
    message: /BERTH_SECRETS_KEY is not base64/,
  });
  const short = join(dir, "short.key");
  writeFileSync(short, randomBytes(31));
  assert.throws(() => loadSecretKey({ file: short }), { message: new RegExp(`from ${short}`) });
  mkdirSync(join(dir, "a-directory"));
  assert.throws(() => loadSecretKey({ file: join(dir, "a-directory") }), {
    code: "unavailable",
    message: /cannot read the secrets key file/,
  });
});

test("the coordinator's key file defaults to <dataDir>/keys/secrets.key", () => {
  const base = { nats: { url: "nats://x" }, agentNats: { password: "p" } };
  assert.equal(
    resolveCoordinatorOptions({ ...base, dataDir: "/srv/b" }).secretsKeyFile,
    "/srv/b/keys/secrets.key",
  );
  assert.equal(
    resolveCoordinatorOptions({ ...base, dataDir: "/srv/b", secretsKeyFile: "/etc/berth/k" }).secretsKeyFile,
    "/etc/berth/k",
  );
});
