// The big image of bench/big-image: the test image's Debian + python3 layer,
// one layer of incompressible data of `bigMib` (a model's weights, say) and
// `extraLayers` more of `extraMib` each, all gzip; and a second image on the
// same base and big layer with one small layer of its own. Built once per
// size into the bench cache (OCI layout), as gzip of random data is slow.

import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { OciLayout, type OciDescriptor, type OciManifest } from "../../agent/images/oci-layout.ts";
import { TEST_CACHE } from "../../test/helpers/rootfs.ts";
import { TEST_IMAGE_TAG, testImageLayout } from "../../test/helpers/test-image.ts";

export interface BigImageSpec {
  bigMib: number;
  extraLayers: number;
  extraMib: number;
  ownMib: number;
}

export interface BigImages {
  layout: OciLayout;
  /** Manifest digests in `layout`. */
  first: string;
  second: string;
  /** Uncompressed bytes of each image's layers. */
  firstBytes: number;
  secondBytes: number;
}

const GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip";

/** A gzip layer blob holding one file of `mib` MiB from /dev/urandom; returns its descriptor and diff id. */
function randomLayer(work: string, layout: OciLayout, name: string, mib: number) {
  const src = join(work, `src-${name}`);
  mkdirSync(join(src, "data"), { recursive: true });
  const blob = join(work, `${name}.tar.gz`);
  execFileSync(
    "bash",
    [
      "-o",
      "pipefail",
      "-c",
      `head -c ${mib}M /dev/urandom > "$1/data/${name}.bin" && tar -C "$1" --numeric-owner --owner=0 --group=0 -cf - data | gzip -1 > "$2"`,
      "bash",
      src,
      blob,
    ],
    { stdio: "inherit" },
  );
  const sha = (cmd: string) =>
    execFileSync("bash", ["-o", "pipefail", "-c", `${cmd} | cut -d' ' -f1`, "bash", blob], {
      encoding: "utf8",
    }).trim();
  rmSync(src, { recursive: true, force: true });
  const digest = `sha256:${sha('sha256sum "$1"')}`;
  const diffId = `sha256:${sha('zcat "$1" | sha256sum')}`;
  const size = statSync(blob).size;
  renameSync(blob, layout.blobPath(digest));
  return { desc: { mediaType: GZIP_LAYER, digest, size } as OciDescriptor, diffId, bytes: mib * 1024 * 1024 };
}

function putJson(layout: OciLayout, value: unknown, mediaType: string): OciDescriptor {
  const bytes = Buffer.from(JSON.stringify(value));
  const digest = `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
  writeFileSync(layout.blobPath(digest), bytes);
  return { mediaType, digest, size: bytes.length };
}

function imageOf(
  layout: OciLayout,
  baseConfig: Record<string, unknown>,
  layers: { desc: OciDescriptor; diffId: string }[],
) {
  const config = putJson(
    layout,
    { ...baseConfig, rootfs: { type: "layers", diff_ids: layers.map((l) => l.diffId) }, history: [] },
    "application/vnd.oci.image.config.v1+json",
  );
  const manifest = {
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
    config,
    layers: layers.map((l) => l.desc),
  };
  return putJson(layout, manifest, manifest.mediaType);
}

export async function bigImages(spec: BigImageSpec): Promise<BigImages> {
  const name = `big-image-${spec.bigMib}-${spec.extraLayers}x${spec.extraMib}-${spec.ownMib}`;
  const dir = join(TEST_CACHE, name);
  const layout = new OciLayout(dir);
  const done = join(dir, "images.json");
  if (existsSync(done))
    return { layout, ...(JSON.parse(readFileSync(done, "utf8")) as Omit<BigImages, "layout">) };

  const testLayout = new OciLayout(await testImageLayout());
  const tagged = testLayout
    .readIndex()
    .manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === TEST_IMAGE_TAG);
  if (!tagged) throw new Error("the test image layout has no bookworm tag");
  const baseManifest = testLayout.readJsonBlob<OciManifest>(tagged.digest);
  const baseConfig = testLayout.readJsonBlob<Record<string, unknown> & { rootfs: { diff_ids: string[] } }>(
    baseManifest.config.digest,
  );
  rmSync(dir, { recursive: true, force: true });
  layout.ensure();
  const work = join(dir, "work");
  mkdirSync(work);
  const base = baseManifest.layers.map((desc, i) => {
    execFileSync("cp", [testLayout.blobPath(desc.digest), layout.blobPath(desc.digest)]);
    return { desc, diffId: baseConfig.rootfs.diff_ids[i] ?? "", bytes: 0 };
  });
  const baseBytes = Number(
    execFileSync("bash", ["-c", `zcat "$1" | wc -c`, "bash", layout.blobPath(base[0]!.desc.digest)], {
      encoding: "utf8",
    }).trim(),
  );
  base[0]!.bytes = baseBytes;
  console.log(`building the bench images in ${dir} (once per size; gzip of random data takes a while)`);
  const big = randomLayer(work, layout, "weights", spec.bigMib);
  const extras = Array.from({ length: spec.extraLayers }, (_, i) =>
    randomLayer(work, layout, `extra${i}`, spec.extraMib),
  );
  const own = randomLayer(work, layout, "own", spec.ownMib);
  const firstLayers = [...base, big, ...extras];
  const secondLayers = [...base, big, own];
  const result = {
    first: imageOf(layout, baseConfig, firstLayers).digest,
    second: imageOf(layout, baseConfig, secondLayers).digest,
    firstBytes: firstLayers.reduce((n, l) => n + l.bytes, 0),
    secondBytes: secondLayers.reduce((n, l) => n + l.bytes, 0),
  };
  rmSync(work, { recursive: true, force: true });
  writeFileSync(done, JSON.stringify(result));
  return { layout, ...result };
}
