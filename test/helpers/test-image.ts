import { execFile } from "node:child_process";
import { existsSync, readFileSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { TestRegistry } from "./registry.ts";
import { buildOnce } from "./build-once.ts";
import { TEST_CACHE, testRootfs } from "./rootfs.ts";

const run = promisify(execFile);

/** Tag of the test image inside its cached OCI layout. */
export const TEST_IMAGE_TAG = "bookworm";
// -v2: the rootfs has `python` beside `python3`; a layout cached before is rebuilt.
const LAYOUT_NAME = "oci-bookworm-python3-v2";

/**
 * An OCI image layout holding the test rootfs (Debian bookworm + python3) as
 * one layer, tagged TEST_IMAGE_TAG. Built with umoci once per machine and
 * cached beside the rootfs; concurrent test processes wait for one builder.
 */
export async function testImageLayout(): Promise<string> {
  const final = join(TEST_CACHE, LAYOUT_NAME);
  const ready = () => existsSync(join(final, "index.json"));
  if (ready()) return final;
  const rootfs = await testRootfs();
  await buildOnce(join(TEST_CACHE, `${LAYOUT_NAME}.lock`), ready, async () => {
    const tmp = join(TEST_CACHE, `${LAYOUT_NAME}.tmp-${process.pid}`);
    rmSync(tmp, { recursive: true, force: true });
    const image = `${tmp}:${TEST_IMAGE_TAG}`;
    try {
      await umoci(["init", "--layout", tmp]);
      await umoci(["new", "--image", image]);
      await umoci(["insert", "--image", image, rootfs, "/"]);
      await umoci([
        "config",
        "--image",
        image,
        "--config.env",
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--config.cmd",
        "python3",
        "--config.workingdir",
        "/",
      ]);
      await umoci(["gc", "--layout", tmp]);
    } catch (e) {
      rmSync(tmp, { recursive: true, force: true });
      throw e;
    }
    rmSync(final, { recursive: true, force: true });
    renameSync(tmp, final);
  });
  return final;
}

async function umoci(args: string[]): Promise<void> {
  try {
    await run("umoci", args, { maxBuffer: 16 * 1024 * 1024, timeout: 5 * 60_000 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(
      `umoci ${args[0]} for the test image failed: ${(err.stderr ?? err.message).slice(-2000)}`,
    );
  }
}

/**
 * Pushes the cached test image to a registry ("127.0.0.1:PORT", an http URL,
 * or a TestRegistry, whose credentials are used). Returns "host/name:tag".
 */
export async function pushTestImage(
  registry: string | TestRegistry,
  name = "berth/python",
  tag = "bookworm",
): Promise<string> {
  const layout = await testImageLayout();
  const host =
    typeof registry === "string" ? registry.replace(/^https?:\/\//, "").replace(/\/+$/, "") : registry.host;
  const ref = `${host}/${name}:${tag}`;
  const args = ["copy", "--quiet", "--dest-tls-verify=false"];
  if (typeof registry !== "string" && registry.auth) {
    args.push("--dest-creds", `${registry.auth.user}:${registry.auth.password}`);
  }
  args.push(`oci:${layout}:${TEST_IMAGE_TAG}`, `docker://${ref}`);
  try {
    await run("skopeo", args, { timeout: 5 * 60_000 });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`pushing the test image to ${ref} failed: ${(err.stderr ?? err.message).slice(-2000)}`);
  }
  return ref;
}

/** The manifest digest of the cached test image, as the registry will serve it. */
export async function testImageDigest(): Promise<string> {
  const layout = await testImageLayout();
  const index = JSON.parse(readFileSync(join(layout, "index.json"), "utf8")) as {
    manifests: Array<{ digest: string; annotations?: Record<string, string> }>;
  };
  const m = index.manifests.find(
    (d) => d.annotations?.["org.opencontainers.image.ref.name"] === TEST_IMAGE_TAG,
  );
  if (!m) throw new Error(`test image layout has no tag ${TEST_IMAGE_TAG}`);
  return m.digest;
}
