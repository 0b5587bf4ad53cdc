// CloudBucket entries of a stub config: checked as the SDK checks them, kept
// apart from Volumes, turned into the agent's BucketMount with the keys read
// from the workspace's secrets (a real SecretService on SQLite), and refused
// by the agent's own check when malformed.

import assert from "node:assert/strict";
import { test } from "node:test";
import { checkBucketMounts } from "../../agent/volumes/buckets.ts";
import { Store } from "../../coordinator/records.ts";
import { stubBucketMounts } from "../../coordinator/volumes/buckets.ts";
import { checkStubBuckets } from "../../shared/buckets.ts";
import { isBerthError } from "../../shared/errors.ts";
import { checkStubVolumes, stubVolumeMounts } from "../../shared/volumes.ts";
import { tempDir } from "../helpers/env.ts";
import { secretService } from "../secrets/helpers.ts";

const bucket = (config: Record<string, unknown>, name = "raw-data") => ({
  name,
  mount_path: "./raw",
  config,
});
const full = {
  read_only: true,
  access_key: "S3_KEY",
  secret_key: "S3_SECRET",
  endpoint: "https://s3.example/",
  region: "us-east-1",
};

test("a volumes list holds Volumes and CloudBuckets; each kind is checked and returned apart", () => {
  const volumes = [{ name: "weights", mount_path: "./weights" }, bucket(full)];
  assert.deepEqual(checkStubVolumes(volumes), [{ name: "weights", mount_path: "./weights" }]);
  assert.deepEqual(stubVolumeMounts("ws-a", volumes), [
    { workspaceId: "ws-a", name: "weights", mountPath: "./weights" },
  ]);
  assert.deepEqual(checkStubBuckets(volumes), [
    { name: "raw-data", mount_path: "./raw", config: { ...full, endpoint: "https://s3.example" } },
  ]);
  // A public bucket: no keys; null and absent fields read the same.
  assert.deepEqual(checkStubBuckets([bucket({ access_key: null })])[0]!.config, {
    read_only: false,
    access_key: null,
    secret_key: null,
    endpoint: null,
    region: null,
  });
});

test("bad CloudBucket entries are refused naming the bucket and the field", () => {
  const cases: [unknown, RegExp][] = [
    [bucket({}, "ab"), /cloud bucket volumes\[0\]\.name "ab" is not valid/],
    [bucket({}, "a/b"), /is not valid/],
    [{ name: "raw-data", mount_path: "../x", config: {} }, /'\.\.'/],
    [bucket(null as never), /config must be a CloudBucketConfig/],
    [bucket({ access_key: "K" }), /cloud bucket raw-data: config needs both access_key and secret_key/],
    [bucket({ access_key: "1K", secret_key: "S" }), /must name a workspace secret/],
    [bucket({ endpoint: "ftp://x" }), /cloud bucket raw-data: endpoint "ftp:\/\/x" must be an http/],
    [bucket({ endpoint: "https://u:p@x" }), /without credentials/],
    [bucket({ endpoint: "https://x/a,b" }), /commas/],
    [bucket({ region: "us east" }), /region "us east"/],
    [bucket({ read_only: "yes" }), /read_only must be a boolean/],
  ];
  for (const [entry, want] of cases) {
    assert.throws(() => checkStubVolumes([entry]), want, JSON.stringify(entry));
  }
  assert.throws(() => checkStubBuckets([bucket({}), bucket({})]), /cloud bucket raw-data is listed twice/);
});

test("the agent checks a request's buckets by the same rules", () => {
  assert.deepEqual(checkBucketMounts(undefined), []);
  assert.deepEqual(
    checkBucketMounts([
      { name: "raw-data", mountPath: "/b", readOnly: true, endpoint: "http://127.0.0.1:9000/" },
    ]),
    [{ name: "raw-data", mountPath: "/b", readOnly: true, endpoint: "http://127.0.0.1:9000" }],
  );
  assert.throws(() => checkBucketMounts([{ name: "x", mountPath: "/b" }]), /buckets\[0\]\.name/);
  assert.throws(
    () => checkBucketMounts([{ name: "raw-data", mountPath: "/b", accessKey: "K" }]),
    /give both keys or neither/,
  );
  assert.throws(
    () => checkBucketMounts([{ name: "raw-data", mountPath: "/b", accessKey: "K:1", secretKey: "S" }]),
    /accessKey is not a usable key/,
  );
  assert.throws(
    () => checkBucketMounts([{ name: "raw-data", mountPath: "/b", accessKey: "K", secretKey: "S\nx" }]),
    /secretKey is not a usable key/,
  );
  assert.throws(
    () =>
      checkBucketMounts([
        { name: "raw-data", mountPath: "/a" },
        { name: "raw-data", mountPath: "/b" },
      ]),
    /listed twice/,
  );
});

test("the coordinator reads the keys from the named secrets of the stub's workspace", async (t) => {
  const store = await Store.open(`sqlite:${tempDir(t)}/berth.db`);
  t.after(() => store.close());
  const secrets = secretService(store);
  const a = (await store.workspaces.create("bucket-a")).id;
  const b = (await store.workspaces.create("bucket-b")).id;
  await secrets.create(a, "S3_KEY", "AKIA-A");
  await secrets.create(a, "S3_SECRET", "secret-a");
  await secrets.create(b, "S3_KEY", "AKIA-B");
  const volumes = [{ name: "weights", mount_path: "./w" }, bucket(full), bucket({}, "public-data")];
  assert.deepEqual(await stubBucketMounts({ workspaceId: a, config: { volumes } }, secrets), [
    {
      name: "raw-data",
      mountPath: "./raw",
      readOnly: true,
      endpoint: "https://s3.example",
      region: "us-east-1",
      accessKey: "AKIA-A",
      secretKey: "secret-a",
    },
    { name: "public-data", mountPath: "./raw" },
  ]);
  // Another workspace's secrets are not this one's: b lacks S3_SECRET.
  const err = await stubBucketMounts({ workspaceId: b, config: { volumes } }, secrets).catch(
    (e: unknown) => e,
  );
  assert.ok(isBerthError(err));
  assert.equal(err.code, "not_found");
  assert.match(err.message, /^cloud bucket raw-data: secret S3_SECRET not found in this workspace/);
  assert.ok(!err.message.includes("AKIA-B"));
  await assert.rejects(
    stubBucketMounts({ workspaceId: a, config: { volumes } }, undefined),
    /cloud bucket raw-data needs secrets S3_KEY and S3_SECRET but this coordinator has no secret store/,
  );
  assert.deepEqual(await stubBucketMounts({ workspaceId: a, config: { volumes: null } }, undefined), []);
});
