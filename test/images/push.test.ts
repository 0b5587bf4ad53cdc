// The cluster registry path of the image store (docs/images.md, "The cluster
// registry"): an image of one store is pushed to a password-protected
// docker-registry with its own bytes (same digest), another store holding the
// cluster credentials pulls it by that reference, a store without them is
// refused, and a manifest deleted through the registry client is gone.

import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { ImageStore, type PushProgress } from "../../agent/images/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { RegistryClient } from "../../shared/registry-client.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { imageFile } from "../helpers/image-layers.ts";

test("push to the cluster registry, pull on another store, delete", { timeout: 5 * 60_000 }, async (t) => {
  if (!needs(t, { root: true, commands: ["skopeo", "umoci", "docker-registry", "tar"] })) return;
  const auth = { user: "berth-cluster", password: "cluster-Pa55-word" };
  const registry = await startTestRegistry(t, { auth });
  const cluster = { host: registry.host, username: auth.user, password: auth.password };

  const rootfs = tempDir(t, "berth-push-rootfs-");
  mkdirSync(join(rootfs, "etc"));
  writeFileSync(join(rootfs, "etc", "marker"), "built on agent one\n");
  // Big enough that the upload reports progress in the middle of a blob.
  writeFileSync(join(rootfs, "payload.bin"), Buffer.alloc(9 * 1024 * 1024, 7));
  const one = new ImageStore({ root: tempDir(t, "berth-push-one-"), clusterRegistry: cluster });
  const local = await one.importRootfs(rootfs, { name: "localhost/berth-build-cache:marker" });

  const seen: PushProgress[] = [];
  const ref = await one.pushToCluster(
    local.ref,
    { repository: "berth/ws-test", tag: "img-marker" },
    {
      onProgress: (p) => seen.push(p),
    },
  );

  await t.test("the pushed reference is the store's digest, under the workspace repository", () => {
    assert.equal(ref, `${registry.host}/berth/ws-test@${local.digest}`);
    const last = seen.at(-1);
    assert.ok(last, "progress was reported");
    assert.equal(last.blobsDone, last.blobsTotal);
    assert.equal(last.bytesDone, last.bytesTotal);
    assert.ok(
      seen.some((p) => p.bytesDone > 0 && p.bytesDone < p.bytesTotal),
      `progress inside the push: ${JSON.stringify(seen)}`,
    );
  });

  await t.test("the registry refuses a pull without credentials", async () => {
    const r = await fetch(`${registry.url}/v2/berth/ws-test/manifests/img-marker`);
    assert.equal(r.status, 401);
    const bare = new ImageStore({ root: tempDir(t, "berth-push-bare-") });
    await assert.rejects(
      bare.pull(ref),
      (e: unknown) => e instanceof BerthError && e.code === "registry_auth_failed",
    );
  });

  await t.test("another store with the cluster credentials pulls the same image", async () => {
    const two = new ImageStore({ root: tempDir(t, "berth-push-two-"), clusterRegistry: cluster });
    const got = await two.pull(ref);
    assert.equal(got.digest, local.digest);
    assert.equal(readFileSync(imageFile(got, join("etc", "marker")), "utf8"), "built on agent one\n");
  });

  await t.test("a second push uploads nothing: every blob is there", async () => {
    const again: PushProgress[] = [];
    const sameTag = await one.pushToCluster(
      local.digest,
      { repository: "berth/ws-test", tag: "img-marker" },
      {
        onProgress: (p) => again.push(p),
      },
    );
    assert.equal(sameTag, ref);
    const last = again.at(-1);
    assert.equal(last?.blobsSkipped, last?.blobsTotal);
    assert.equal(again.length, 1, "the tag already names this manifest: no blob is asked about");

    const otherTag: PushProgress[] = [];
    await one.pushToCluster(
      local.digest,
      { repository: "berth/ws-test", tag: "img-marker-2" },
      { onProgress: (p) => otherTag.push(p) },
    );
    assert.equal(
      otherTag.length,
      1 + (otherTag.at(-1)?.blobsTotal ?? 0),
      "a new tag: each blob is asked about",
    );
    assert.equal(otherTag.at(-1)?.blobsSkipped, otherTag.at(-1)?.blobsTotal, "and none uploaded");
  });

  await t.test("a push with wrong credentials fails naming the registry, never the password", async () => {
    const wrong = new ImageStore({
      root: tempDir(t, "berth-push-wrong-"),
      clusterRegistry: { ...cluster, password: "not-the-password" },
    });
    const img = await wrong.importRootfs(rootfs, { name: "localhost/x:y" });
    await assert.rejects(
      wrong.pushToCluster(img.ref, { repository: "berth/ws-test", tag: "t" }),
      (e: unknown) => {
        assert.ok(e instanceof BerthError);
        assert.equal(e.code, "registry_auth_failed");
        assert.ok(e.message.includes(registry.host), e.message);
        assert.ok(!e.message.includes("not-the-password"));
        return true;
      },
    );
  });

  await t.test("deleting the manifest through the registry client removes it", async () => {
    const client = new RegistryClient({
      host: registry.host,
      insecure: true,
      credentials: { username: auth.user, password: auth.password },
    });
    assert.equal(await client.deleteManifest("berth/ws-test", local.digest), true);
    assert.equal(await client.deleteManifest("berth/ws-test", local.digest), false);
    const three = new ImageStore({ root: tempDir(t, "berth-push-three-"), clusterRegistry: cluster });
    await assert.rejects(three.pull(ref), (e: unknown) => e instanceof BerthError && e.code === "not_found");
  });
});
