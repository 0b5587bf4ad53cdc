import assert from "node:assert/strict";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { ImageStore, resolveRegistryCredentials } from "../../agent/images/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";
import { CountingFetch, RecordingRunner, skopeoCopies, skopeoInspects } from "./runner-hooks.ts";
import { imageFile } from "../helpers/image-layers.ts";

test("pulls from a registry with htpasswd auth", { timeout: 10 * 60_000 }, async (t) => {
  if (!needs(t, { root: true, commands: ["skopeo", "umoci", "docker-registry"] })) return;
  const password = "s3cret-Pa55";
  const registry = await startTestRegistry(t, { auth: { user: "berth", password } });
  const ref = await pushTestImage(registry, "private/python", "bookworm");
  const root = tempDir(t, "berth-images-");
  const runner = new RecordingRunner();
  const http = new CountingFetch();
  const store = new ImageStore({ root, runner, fetch: http.fetch });
  const noAuthFilesLeft = () => assert.deepEqual(readdirSync(join(root, "tmp")), []);

  await t.test("the registry really demands auth", async () => {
    const r = await fetch(`${registry.url}/v2/private/python/manifests/bookworm`);
    assert.equal(r.status, 401);
  });

  await t.test("without credentials: a clear auth error naming the ref", async () => {
    await assert.rejects(store.pull(ref), (e: unknown) => {
      assert.ok(e instanceof BerthError);
      assert.equal(e.code, "registry_auth_failed");
      assert.equal(e.kind, "PermissionDenied");
      assert.ok(e.message.includes(ref), e.message);
      assert.ok(e.message.includes(registry.host), e.message);
      return true;
    });
    noAuthFilesLeft();
  });

  await t.test("a wrong password is refused, and the password is not in the error", async () => {
    const wrong = resolveRegistryCredentials(
      { REGISTRY_USERNAME: "berth", REGISTRY_PASSWORD: "not-the-Pa55" },
      {},
    );
    await assert.rejects(store.pull(ref, { credentials: wrong! }), (e: unknown) => {
      assert.ok(e instanceof BerthError);
      assert.equal(e.code, "registry_auth_failed");
      assert.ok(!e.message.includes("not-the-Pa55"));
      return true;
    });
    assert.equal(skopeoCopies(runner), 0);
    noAuthFilesLeft();
  });

  await t.test("dict-form credentials pull the image", async () => {
    const creds = resolveRegistryCredentials({ REGISTRY_USERNAME: "berth", REGISTRY_PASSWORD: password }, {});
    const info = await store.pull(ref, { credentials: creds! });
    assert.ok(existsSync(imageFile(info, "usr/bin/python3")));
    assert.equal(http.blobGets(), info.layers.length + 1, "the blobs came with the credentials");
    assert.equal(skopeoCopies(runner), 0);
    noAuthFilesLeft();
  });

  await t.test(
    "the freshness window does not let a caller without (or with wrong) credentials skip auth",
    async () => {
      assert.ok(store.options.tagFreshnessMs > 0, "the default window is on");
      const good = resolveRegistryCredentials(
        { REGISTRY_USERNAME: "berth", REGISTRY_PASSWORD: password },
        {},
      );
      await store.pull(ref, { credentials: good! });
      await assert.rejects(
        store.pull(ref),
        (e: unknown) => e instanceof BerthError && e.code === "registry_auth_failed",
      );
      const wrong = resolveRegistryCredentials(
        { REGISTRY_USERNAME: "berth", REGISTRY_PASSWORD: "nope-nope" },
        {},
      );
      await assert.rejects(
        store.pull(ref, { credentials: wrong! }),
        (e: unknown) => e instanceof BerthError && e.code === "registry_auth_failed",
      );
      const inspects = skopeoInspects(runner);
      await store.pull(ref, { credentials: good! });
      assert.equal(skopeoInspects(runner), inspects, "the same credentials within the window: no round trip");
    },
  );

  await t.test("list-form credentials (looked up in env) resolve the tag on a fresh store", async () => {
    const env = { REGISTRY_USERNAME: "berth", REGISTRY_PASSWORD: password };
    const creds = resolveRegistryCredentials(["REGISTRY_USERNAME", "REGISTRY_PASSWORD"], env);
    const r = new RecordingRunner();
    const h = new CountingFetch();
    const fresh = new ImageStore({ root: tempDir(t, "berth-images-"), runner: r, fetch: h.fetch });
    const info = await fresh.pull(ref, { credentials: creds! });
    assert.ok(existsSync(imageFile(info, "usr/bin/python3")));
    assert.equal(h.blobGets(), info.layers.length + 1);
    // Credentials reach skopeo through a private auth file, not argv.
    assert.ok(r.calls.every((c) => !c.args.join(" ").includes(password)));
    assert.ok(r.calls.some((c) => c.args.includes("--authfile")));
  });

  await t.test("AWS keys on a store with the ECR exchange turned off are refused clearly", async () => {
    const store = new ImageStore({ root, runner, ecrLogin: null });
    const keys = resolveRegistryCredentials(
      { AWS_ACCESS_KEY_ID: "AKIAEXAMPLE", AWS_SECRET_ACCESS_KEY: "wJalr", AWS_REGION: "us-east-1" },
      {},
    );
    await assert.rejects(
      store.pull(ref, { credentials: keys! }),
      (e: unknown) =>
        e instanceof BerthError && e.code === "failed_precondition" && /AWS_ECR_PASSWORD/.test(e.message),
    );
  });
});
