import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { ImageStore } from "../../agent/images/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { freePort } from "../../shared/net.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage, testImageDigest } from "../helpers/test-image.ts";
import { mountImage } from "../helpers/image-layers.ts";
import { CountingFetch, RecordingRunner, skopeoCopies, skopeoInspects } from "./runner-hooks.ts";

const TOOLS = ["skopeo", "umoci", "docker-registry", "tar"];

/** Files under a store's work and layer dirs: what a failed pull must not leave. */
const leftovers = (root: string) => ({
  tmp: existsSync(join(root, "tmp")) ? readdirSync(join(root, "tmp")) : [],
  layers: existsSync(join(root, "layers")) ? readdirSync(join(root, "layers")) : [],
});

async function registryDigest(registryUrl: string, name: string, tag: string): Promise<string> {
  const r = await fetch(`${registryUrl}/v2/${name}/manifests/${tag}`, {
    method: "HEAD",
    headers: {
      accept:
        "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json",
    },
  });
  assert.equal(r.status, 200);
  return r.headers.get("docker-content-digest") ?? "";
}

test("image store against a real registry", { timeout: 15 * 60_000 }, async (t) => {
  if (!needs(t, { root: true, commands: TOOLS })) return;
  const registry = await startTestRegistry(t);
  const ref = await pushTestImage(registry.host);
  const registryDigestOfRef = await registryDigest(registry.url, "berth/python", "bookworm");

  const root = tempDir(t, "berth-images-");
  const runner = new RecordingRunner();
  const http = new CountingFetch();
  // Freshness window off: these tests count the registry round trips of every pull.
  const store = new ImageStore({ root, runner, fetch: http.fetch, tagFreshnessMs: 0 });

  await t.test("pull unpacks a runnable rootfs whose digest is the registry's", async (st) => {
    const info = await store.pull(ref);
    assert.equal(info.digest, registryDigestOfRef);
    assert.equal(info.digest, await testImageDigest());
    assert.equal(info.ref, ref);
    const manifest = JSON.parse(
      execFileSync("skopeo", ["inspect", "--raw", "--tls-verify=false", `docker://${ref}`], {
        encoding: "utf8",
      }),
    ) as { layers: { digest: string }[] };
    assert.deepEqual(
      info.layers.map((l) => readlinkSync(l)),
      manifest.layers.map((l) => join("..", "layers", l.digest.slice("sha256:".length))).reverse(),
      "one lower dir per layer, uppermost first, through short links",
    );
    assert.ok(info.layers.every((l) => l.startsWith(join(root, "l"))));
    const rootfs = mountImage(st, info);
    assert.ok(existsSync(join(rootfs, "usr/bin/python3")));
    assert.deepEqual(info.config.cmd, ["python3"]);
    assert.ok(info.config.env.some((e) => e.startsWith("PATH=")));
    assert.ok(info.sizeBytes > 10 * 1024 * 1024, `size ${info.sizeBytes}`);
    const out = execFileSync("chroot", [rootfs, "/usr/bin/python3", "-c", "print(6*7)"], {
      encoding: "utf8",
    });
    assert.equal(out.trim(), "42");
    assert.equal(skopeoCopies(runner), 0, "the blobs come over HTTP, not through skopeo");
    assert.equal(http.blobGets(), manifest.layers.length + 1, "config and each layer fetched once");
    assert.deepEqual(leftovers(root).tmp, []);
  });

  await t.test("a second pull resolves the tag but fetches and unpacks nothing", async () => {
    const before = { blobs: http.blobGets(), inspects: skopeoInspects(runner) };
    const layers = leftovers(root).layers;
    const info = await store.pull(ref);
    assert.equal(info.digest, registryDigestOfRef);
    assert.equal(http.blobGets(), before.blobs);
    assert.deepEqual(leftovers(root).layers, layers);
    assert.equal(skopeoInspects(runner), before.inspects + 1);
  });

  await t.test("within the freshness window a cached tag is served without asking the registry", async () => {
    const r = new RecordingRunner();
    const s = new ImageStore({ root, runner: r, tagFreshnessMs: 60_000 });
    const first = await s.pull(ref);
    assert.equal(skopeoInspects(r), 1, "a new store has resolved nothing yet");
    const again = await s.pull(ref);
    assert.equal(again.digest, first.digest);
    assert.deepEqual(again.layers, first.layers);
    assert.equal(skopeoInspects(r), 1, "served from the cache");
    await s.pull(ref, {
      credentials: { kind: "basic", source: "generic", username: "someone", password: "secret" },
    });
    assert.equal(skopeoInspects(r), 2, "other credentials are checked by the registry");
    await s.pull(ref, {
      credentials: { kind: "basic", source: "generic", username: "someone", password: "other" },
    });
    assert.equal(skopeoInspects(r), 3, "same user, another password: checked too");
    await s.pull(ref, {
      credentials: { kind: "basic", source: "generic", username: "someone", password: "secret" },
    });
    assert.equal(skopeoInspects(r), 3);
    assert.equal(skopeoCopies(r), 0);

    const short = new RecordingRunner();
    let clock = 1_000_000;
    const s2 = new ImageStore({ root, runner: short, tagFreshnessMs: 100, now: () => clock });
    await s2.pull(ref);
    clock += 100;
    await s2.pull(ref);
    assert.equal(skopeoInspects(short), 1, "at the edge of the window the cache still serves");
    clock += 1;
    await s2.pull(ref);
    assert.equal(skopeoInspects(short), 2, "past the window the tag is resolved again");
  });

  await t.test("the index survives a restart: a new store on the root knows the image", async () => {
    const http2 = new CountingFetch();
    const again = new ImageStore({ root, fetch: http2.fetch });
    assert.equal(again.get(ref)?.digest, registryDigestOfRef);
    assert.equal(again.get(registryDigestOfRef)?.ref, ref);
    assert.equal(again.list().length, 1);
    await again.pull(ref);
    assert.equal(http2.blobGets(), 0);
  });

  await t.test("pullDefault pulls the configured default image", async () => {
    const runner2 = new RecordingRunner();
    const s = new ImageStore({ root, runner: runner2, defaultImage: ref });
    assert.equal((await s.pullDefault()).digest, registryDigestOfRef);
    assert.equal((await s.pull(undefined)).ref, ref);
  });

  await t.test(
    "5 concurrent pulls of one ref, plus a ref with the same digest, fetch and unpack once",
    async () => {
      const alias = await pushTestImage(registry.host, "berth/alias", "v1");
      const r = new RecordingRunner();
      const h = new CountingFetch();
      const s = new ImageStore({ root: tempDir(t, "berth-images-"), runner: r, fetch: h.fetch });
      const infos = await Promise.all([...Array.from({ length: 5 }, () => s.pull(ref)), s.pull(alias)]);
      for (const i of infos) assert.equal(i.digest, registryDigestOfRef);
      assert.equal(h.blobGets(), (infos[0]?.layers.length ?? 0) + 1);
      assert.equal(skopeoInspects(r), 2, "one inspect per distinct ref");
      assert.deepEqual(s.get(alias)?.refs.sort(), [alias, ref].sort());
    },
  );

  await t.test("an unknown image is not_found, names the ref, and leaves nothing", async () => {
    const missing = `${registry.host}/berth/nope:missing`;
    await assert.rejects(store.pull(missing), (e: unknown) => {
      assert.ok(e instanceof BerthError);
      assert.equal(e.code, "not_found");
      assert.ok(e.message.includes(missing), e.message);
      assert.match(e.message, /manifest unknown|name unknown/);
      return true;
    });
    assert.deepEqual(leftovers(root).tmp, []);
    assert.equal(store.get(missing), undefined);
  });

  await t.test("a registry that is down is unavailable, names the ref, and leaves nothing", async () => {
    const dead = `127.0.0.1:${await freePort()}/berth/python:bookworm`;
    const r = new RecordingRunner();
    const s = new ImageStore({ root: tempDir(t, "berth-images-"), runner: r });
    await assert.rejects(s.pull(dead), (e: unknown) => {
      assert.ok(e instanceof BerthError);
      assert.equal(e.code, "unavailable");
      assert.ok(e.message.includes(dead), e.message);
      assert.match(e.message, /connection refused/);
      return true;
    });
    assert.deepEqual(leftovers(s.options.root), { tmp: [], layers: [] });
  });

  await t.test("a layer that fails its digest check leaves nothing, and a retry pulls it whole", async () => {
    const own = await startTestRegistry(t);
    const bad = await pushTestImage(own.host, "berth/corrupt", "v1");
    const manifest = JSON.parse(
      execFileSync("skopeo", ["inspect", "--raw", "--tls-verify=false", `docker://${bad}`], {
        encoding: "utf8",
      }),
    ) as { layers: { digest: string; size: number }[] };
    const biggest = [...manifest.layers].sort((a, b) => b.size - a.size)[0]!;
    const hex = biggest.digest.slice("sha256:".length);
    const data = join(
      own.dir,
      "data",
      "docker",
      "registry",
      "v2",
      "blobs",
      "sha256",
      hex.slice(0, 2),
      hex,
      "data",
    );
    const good = readFileSync(data);
    // Same size, one byte changed near the end: tar has unpacked nearly all of it when the digest fails.
    const corrupt = Buffer.from(good);
    corrupt[corrupt.length - 100] = (corrupt[corrupt.length - 100] ?? 0) ^ 0xff;
    writeFileSync(data, corrupt);
    const fresh = tempDir(t, "berth-images-");
    const s = new ImageStore({ root: fresh });
    await assert.rejects(s.pull(bad), (e: unknown) => {
      assert.ok(e instanceof BerthError, String(e));
      assert.ok(e.message.includes(biggest.digest), e.message);
      return true;
    });
    assert.deepEqual(leftovers(fresh).tmp, []);
    assert.ok(!leftovers(fresh).layers.includes(hex), "the bad layer left no dir");
    assert.ok(!existsSync(join(fresh, "oci", "blobs", "sha256", hex)), "nor a blob");
    assert.equal(s.get(bad), undefined);
    assert.deepEqual(s.list(), []);

    writeFileSync(data, good);
    const h = new CountingFetch();
    const retry = new ImageStore({ root: fresh, fetch: h.fetch });
    const info = await retry.pull(bad);
    assert.ok(existsSync(join(mountImage(t, info), "usr/bin/python3")));
    assert.ok(h.blobGets() >= 1);
  });

  await t.test("a pull cancelled while its blobs download stops and leaves nothing", async () => {
    const fresh = tempDir(t, "berth-images-");
    const abort = new AbortController();
    const h = new CountingFetch((url) => {
      if (url.includes("/blobs/")) abort.abort();
    });
    const s = new ImageStore({ root: fresh, fetch: h.fetch });
    await assert.rejects(s.pull(ref, { signal: abort.signal }), (e: unknown) => {
      assert.ok(e instanceof BerthError);
      assert.match(e.message, /cancelled/);
      return true;
    });
    assert.ok(h.blobGets() >= 1);
    assert.deepEqual(leftovers(fresh), { tmp: [], layers: [] });
    assert.deepEqual(s.list(), []);
  });

  await t.test("a cached tag is still served when its registry goes away", async () => {
    const shortLived = await startTestRegistry(t);
    const gone = await pushTestImage(shortLived.host, "berth/gone", "v1");
    // Window off, so the second pull really asks the (stopped) registry and falls back.
    const s = new ImageStore({ root: tempDir(t, "berth-images-"), tagFreshnessMs: 0 });
    const first = await s.pull(gone);
    await shortLived.stop();
    const again = await s.pull(gone);
    assert.equal(again.digest, first.digest);
    const never = `${shortLived.host}/berth/never:v1`;
    await assert.rejects(s.pull(never), (e: unknown) => e instanceof BerthError && e.code === "unavailable");
  });

  await t.test("work left by a killed agent is cleared when the store opens", async () => {
    const fresh = tempDir(t, "berth-images-");
    mkdirSync(join(fresh, "tmp", "work-killed", "rootfs", "etc"), { recursive: true });
    writeFileSync(join(fresh, "tmp", "work-killed", "rootfs", "etc", "half"), "x");
    const s = new ImageStore({ root: fresh });
    assert.deepEqual(s.list(), []);
    assert.deepEqual(leftovers(fresh), { tmp: [], layers: [] });
  });
});
