// Each layer is unpacked once into a directory of its own, whiteouts in
// overlay form, and an image is its layers stacked as overlay lower dirs: the
// overlay must show the tree `umoci raw unpack` makes of the same image
// (files, modes, owners, links, whiteouts, opaque dirs), a commit must unpack
// only its new layer, and the parent's layers must be unchanged.

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { execFileSync } from "node:child_process";
import {
  chownSync,
  linkSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { ImageStore } from "../../agent/images/index.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { mountImage } from "../helpers/image-layers.ts";
import { RecordingRunner, umociUnpacks } from "./runner-hooks.ts";

/** Every path under `root` with its type, mode, owner and content (or link target). */
function describeTree(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (rel: string) => {
    for (const name of readdirSync(join(root, rel)).sort()) {
      const path = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(root, path));
      const head = `${(st.mode & 0o170000).toString(8)} ${(st.mode & 0o7777).toString(8)} ${st.uid}:${st.gid}`;
      if (st.isDirectory()) {
        out[path] = `${head} dir`;
        walk(path);
      } else if (st.isSymbolicLink()) out[path] = `${head} -> ${readlinkSync(join(root, path))}`;
      else if (st.isFile())
        out[path] = `${head} ${createHash("sha256")
          .update(readFileSync(join(root, path)))
          .digest("hex")}`;
      else out[path] = `${head} rdev ${st.rdev}`;
    }
  };
  walk("");
  return out;
}

function makeParent(dir: string): void {
  mkdirSync(join(dir, "etc/conf.d"), { recursive: true });
  mkdirSync(join(dir, "usr/lib/keep"), { recursive: true });
  mkdirSync(join(dir, "var/cache/apt"), { recursive: true });
  writeFileSync(join(dir, "etc/motd"), "parent motd\n");
  writeFileSync(join(dir, "etc/conf.d/a"), "a\n");
  writeFileSync(join(dir, "etc/conf.d/b"), "b\n");
  writeFileSync(join(dir, "usr/lib/keep/lib.so"), "library\n", { mode: 0o755 });
  writeFileSync(join(dir, "var/cache/apt/pkg1"), "cached\n");
  writeFileSync(join(dir, "var/cache/apt/pkg2"), "cached\n");
  writeFileSync(join(dir, "gone.txt"), "to be deleted\n");
  linkSync(join(dir, "etc/motd"), join(dir, "etc/motd.hardlink"));
  symlinkSync("usr/lib", join(dir, "lib"));
  chownSync(join(dir, "etc/conf.d/b"), 1234, 5678);
}

/** A layer as a container's commit writes it: plain entries plus OCI whiteout files. */
function makeLayer(work: string, tarPath: string, build: (dir: string) => string[]): void {
  const dir = join(work, `layer-${Math.random().toString(16).slice(2)}`);
  mkdirSync(dir);
  const entries = build(dir);
  execFileSync("tar", [
    "--create",
    "--file",
    tarPath,
    "--numeric-owner",
    "--no-recursion",
    "-C",
    dir,
    ...entries,
  ]);
}

test("an image is its layers, unpacked once each, stacked by overlayfs", {
  timeout: 5 * 60_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: ["umoci", "skopeo", "tar", "python3"] })) return;
  const work = tempDir(t, "berth-layer-apply-");
  const runner = new RecordingRunner();
  const store = new ImageStore({ root: join(work, "store"), runner });
  const parentDir = join(work, "parent");
  mkdirSync(parentDir);
  makeParent(parentDir);
  const parent = await store.importRootfs(parentDir, { name: "berth.local/layer-parent:1" });
  const parentBefore = describeTree(mountImage(t, parent));
  assert.equal(parent.layers.length, 1);
  const parentLayerBefore = describeTree(parent.layers[0]!);

  const umociTree = (digest: string, name: string) => {
    const layout = join(work, "store", "oci");
    const out = join(work, name);
    execFileSync("umoci", ["raw", "unpack", "--image", `${layout}:${digest.slice("sha256:".length)}`, out], {
      stdio: "ignore",
    });
    return describeTree(out);
  };

  await t.test("files, owners, modes, whiteouts and opaque dirs as umoci makes them", async (st) => {
    const tar = join(work, "layer1.tar");
    makeLayer(work, tar, (d) => {
      mkdirSync(join(d, "etc/conf.d"), { recursive: true });
      writeFileSync(join(d, "etc/motd"), "child motd\n");
      writeFileSync(join(d, "etc/conf.d/c"), "c\n", { mode: 0o4755 });
      chownSync(join(d, "etc/conf.d/c"), 4321, 8765);
      writeFileSync(join(d, "etc/conf.d/.wh.a"), "");
      writeFileSync(join(d, ".wh.gone.txt"), "");
      mkdirSync(join(d, "var/cache/apt"), { recursive: true });
      writeFileSync(join(d, "var/cache/apt/.wh..wh..opq"), "");
      writeFileSync(join(d, "var/cache/apt/fresh"), "fresh\n");
      mkdirSync(join(d, "usr/lib"), { recursive: true });
      writeFileSync(join(d, "usr/lib/.wh.keep"), "");
      mkdirSync(join(d, "opt/app/deep"), { recursive: true });
      writeFileSync(join(d, "opt/app/deep/x"), "x\n");
      linkSync(join(d, "opt/app/deep/x"), join(d, "opt/app/x.link"));
      return [
        "./etc",
        "./etc/motd",
        "./etc/conf.d",
        "./etc/conf.d/c",
        "./etc/conf.d/.wh.a",
        "./.wh.gone.txt",
        "./var",
        "./var/cache",
        "./var/cache/apt",
        "./var/cache/apt/.wh..wh..opq",
        "./var/cache/apt/fresh",
        "./usr",
        "./usr/lib",
        "./usr/lib/.wh.keep",
        "./opt",
        "./opt/app",
        "./opt/app/deep",
        "./opt/app/deep/x",
        "./opt/app/x.link",
      ];
    });
    const unpacksBefore = umociUnpacks(runner);
    const child = await store.commitLayer(parent.ref, tar, { name: "berth.local/layer-child:1" });
    assert.equal(umociUnpacks(runner), unpacksBefore, "the commit did not unpack the whole image");
    assert.deepEqual(child.layers.slice(1), parent.layers, "the parent's layer is shared, not copied");
    const view = mountImage(st, child);
    const tree = describeTree(view);
    assert.deepEqual(tree, umociTree(child.digest, "umoci-child"));
    assert.equal(readFileSync(join(view, "etc/motd"), "utf8"), "child motd\n");
    assert.equal(tree["gone.txt"], undefined);
    assert.equal(tree["var/cache/apt/pkg1"], undefined, "the opaque dir hides the parent's files");
    const own = describeTree(child.layers[0]!);
    assert.match(own["gone.txt"] ?? "", /^20000 600 0:0 rdev 0$/, "a whiteout is a 0/0 character device");
    assert.equal(own[".wh.gone.txt"], undefined);
    assert.equal(
      execFileSync(
        "python3",
        [
          "-c",
          "import os, sys; print(os.getxattr(sys.argv[1], 'trusted.overlay.opaque').decode(), end='')",
          join(child.layers[0]!, "var/cache/apt"),
        ],
        { encoding: "utf8" },
      ),
      "y",
    );
    assert.deepEqual(describeTree(mountImage(st, parent)), parentBefore, "the parent is unchanged");
    assert.deepEqual(describeTree(parent.layers[0]!), parentLayerBefore);

    await st.test("and a grandchild on top of it", async () => {
      const tar2 = join(work, "layer2.tar");
      makeLayer(work, tar2, (d) => {
        mkdirSync(join(d, "opt/app"), { recursive: true });
        writeFileSync(join(d, "opt/app/.wh.deep"), "");
        return ["./opt", "./opt/app", "./opt/app/.wh.deep"];
      });
      const grandchild = await store.commitLayer(child.ref, tar2, { name: "berth.local/layer-child:2" });
      assert.equal(umociUnpacks(runner), unpacksBefore);
      assert.deepEqual(grandchild.layers.slice(1), child.layers);
      const g = describeTree(mountImage(st, grandchild));
      assert.deepEqual(g, umociTree(grandchild.digest, "umoci-grandchild"));
      assert.equal(g["opt/app/deep"], undefined);
      assert.ok(describeTree(mountImage(st, child))["opt/app/deep/x"], "the child keeps its files");
    });
  });

  await t.test("a layer's directory replaces a symlink of the parent, as in containerd", async (st) => {
    const tar = join(work, "layer-symlink.tar");
    makeLayer(work, tar, (d) => {
      mkdirSync(join(d, "lib"), { recursive: true });
      writeFileSync(join(d, "lib/added.so"), "added\n");
      return ["./lib/added.so"];
    });
    const before = umociUnpacks(runner);
    const child = await store.commitLayer(parent.ref, tar, { name: "berth.local/layer-child:3" });
    assert.equal(umociUnpacks(runner), before);
    const view = mountImage(st, child);
    // Each layer unpacks into an empty dir, so a path never goes through a lower layer's symlink.
    assert.equal(readFileSync(join(view, "lib/added.so"), "utf8"), "added\n");
    assert.ok(lstatSync(join(view, "lib")).isDirectory());
    assert.equal(describeTree(view)["usr/lib/added.so"], undefined);
    assert.deepEqual(describeTree(parent.layers[0]!), parentLayerBefore);
  });
});
