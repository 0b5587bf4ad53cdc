// Time from "run this image" to a task's first output on a host that never
// saw the image: a >= 4 GB image in 5 gzip layers (one of 2 GiB of random
// bytes), served by a local docker-registry. Three contenders, interleaved,
// the first one rotating each round, each on an empty cache:
//
//   berth   ImageStore.pull (skopeo inspect to resolve the tag, then every
//           layer streamed in parallel through its digest check into tar and
//           the layer store) + a container on the layers' overlay
//   before  skopeo inspect + skopeo copy of the whole image + umoci raw unpack
//           into one rootfs (the agent's pull until now) + a container on it
//   floor   every blob fetched in parallel with curl, each piped into its own
//           tar -xz (no digest check, no blob kept) + a container on the dirs
//
// The container is the same for all: `runc run` of python3 -c "print('ready')"
// on a read-only overlay of the unpacked dirs; the time ends when it printed.
// Then, once: a second image on the same base and 2 GiB layer, pulled after
// the first, with the bytes fetched and the disk it takes measured for berth
// and for the skopeo + umoci store.
//
// Usage: node --import tsx bench/big-image/run.ts [--rounds 3] [--big-mib 2048]
//          [--extra-layers 3] [--extra-mib 704] [--own-mib 64]
//          [--tee-floor] (adds the floor that also keeps each blob)
//          [--only name,...] (those contenders, no second image; a partial result)
//          [--second-only] (only the second-image part)
// Needs root, docker-registry, skopeo, umoci, curl, runc.

import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, statfsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { performance } from "node:perf_hooks";
import { parseArgs } from "node:util";
import { ImageStore } from "../../agent/images/index.ts";
import { pushImage } from "../../agent/images/push.ts";
import { TEST_CACHE } from "../../test/helpers/rootfs.ts";
import { startTestRegistry } from "../../test/helpers/registry.ts";
import { Cleanup } from "../lib/cleanup.ts";
import { removeTree } from "../lib/fs.ts";
import { machineInfo, toolVersion } from "../lib/machine.ts";
import { exec, mustExec } from "../lib/proc.ts";
import { fmtMs, fmtRatio, formatTable, summarize, writeResults } from "../lib/stats.ts";
import { bigImages } from "./image.ts";

const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "3" },
    "big-mib": { type: "string", default: "2048" },
    "extra-layers": { type: "string", default: "3" },
    "extra-mib": { type: "string", default: "704" },
    "own-mib": { type: "string", default: "64" },
    "tee-floor": { type: "boolean", default: false },
    "second-only": { type: "boolean", default: false },
    only: { type: "string" },
  },
});
const rounds = Number(values.rounds);
const spec = {
  bigMib: Number(values["big-mib"]),
  extraLayers: Number(values["extra-layers"]),
  extraMib: Number(values["extra-mib"]),
  ownMib: Number(values["own-mib"]),
};

const GiB = 1024 ** 3;
const freeBytes = (dir: string) => {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
};
const diskBytes = (...dirs: string[]) =>
  Number(
    execFileSync("du", ["-s", "--block-size=1", "-c", ...dirs], { encoding: "utf8" })
      .trim()
      .split("\n")
      .at(-1)
      ?.split("\t")[0],
  );

/** A read-only overlay of `lowers` (uppermost first), python3 printing `ready` from it under runc; ms until it printed. */
async function firstOutput(work: string, lowers: string[], id: string): Promise<void> {
  const empty = join(work, "empty");
  const merged = join(work, "merged");
  mkdirSync(empty, { recursive: true });
  mkdirSync(merged, { recursive: true });
  await mustExec("mount", [
    "-t",
    "overlay",
    "overlay",
    "-o",
    `ro,lowerdir=${[...lowers, empty].join(":")}`,
    merged,
  ]);
  try {
    const bundle = join(work, "bundle");
    mkdirSync(bundle);
    await mustExec("runc", ["spec", "--bundle", bundle]);
    const specPath = join(bundle, "config.json");
    const s = JSON.parse(execFileSync("cat", [specPath], { encoding: "utf8" }));
    s.process.terminal = false;
    s.process.args = ["python3", "-c", "print('ready')"];
    s.root = { path: merged, readonly: true };
    execFileSync("tee", [specPath], { input: JSON.stringify(s), stdio: ["pipe", "ignore", "inherit"] });
    const r = await exec("runc", ["run", "--bundle", bundle, id], { timeoutMs: 120_000 });
    if (r.code !== 0 || !r.stdout.includes("ready")) {
      await exec("runc", ["delete", "--force", id]);
      throw new Error(`the container printed no ready (${r.code}): ${r.stderr.slice(-500)}`);
    }
  } finally {
    await exec("umount", [merged]);
  }
}

interface Ctx {
  registryHost: string;
  ref: string;
}

type Contender = { name: string; run: (work: string, ctx: Ctx, id: string) => Promise<void> };

/** The floor: every blob fetched in parallel with curl, piped into its own tar -xz (with `keep`, also tee'd to a file). */
async function curlTar(work: string, ctx: Ctx, id: string, keep: boolean): Promise<void> {
  const [host, rest] = [ctx.registryHost, ctx.ref.slice(ctx.registryHost.length + 1)];
  const [repo, tag] = rest.split(":") as [string, string];
  const m = (await (
    await fetch(`http://${host}/v2/${repo}/manifests/${tag}`, {
      headers: { accept: "application/vnd.oci.image.manifest.v1+json" },
    })
  ).json()) as { config: { digest: string }; layers: { digest: string }[] };
  const dirs = m.layers.map((_, i) => join(work, `layer${i}`));
  for (const d of dirs) mkdirSync(d);
  const url = (digest: string) => `http://${host}/v2/${repo}/blobs/${digest}`;
  const pipe = keep
    ? 'curl -sf "$1" | tee "$2.blob" | tar -xz --numeric-owner -C "$2"'
    : 'curl -sf "$1" | tar -xz --numeric-owner -C "$2"';
  await Promise.all([
    mustExec("curl", ["-sfo", join(work, "config.json"), url(m.config.digest)]),
    ...m.layers.map((l, i) =>
      mustExec("bash", ["-o", "pipefail", "-c", pipe, "bash", url(l.digest), dirs[i]!], {
        timeoutMs: 1_800_000,
      }),
    ),
  ]);
  await firstOutput(work, [...dirs].reverse(), id);
}

const FLOOR = "floor: curl | tar -xz, in parallel";
const allContenders: Contender[] = [
  {
    name: "berth",
    async run(work, ctx, id) {
      const store = new ImageStore({ root: join(work, "store"), tagFreshnessMs: 0 });
      const info = await store.pull(ctx.ref);
      await firstOutput(work, info.layers, id);
    },
  },
  {
    name: "skopeo copy + umoci unpack",
    async run(work, ctx, id) {
      await mustExec("skopeo", ["inspect", "--raw", "--tls-verify=false", `docker://${ctx.ref}`]);
      await mustExec(
        "skopeo",
        ["copy", "--quiet", "--src-tls-verify=false", `docker://${ctx.ref}`, `oci:${work}/layout:img`],
        {
          timeoutMs: 1_800_000,
        },
      );
      await mustExec("umoci", ["raw", "unpack", "--image", `${work}/layout:img`, `${work}/rootfs`], {
        timeoutMs: 1_800_000,
      });
      await firstOutput(work, [`${work}/rootfs`], id);
    },
  },
  { name: FLOOR, run: (work, ctx, id) => curlTar(work, ctx, id, false) },
  ...(values["tee-floor"]
    ? [
        {
          name: "floor + each blob kept (curl | tee | tar -xz)",
          run: (work: string, ctx: Ctx, id: string) => curlTar(work, ctx, id, true),
        },
      ]
    : []),
];

/** `--only a,b`: the contenders whose name contains one of these (the second-image part is skipped then). */
const only = values.only?.split(",").map((o) => o.trim().toLowerCase());
const contenders = allContenders.filter((c) => !only || only.some((o) => c.name.toLowerCase().includes(o)));

async function secondImage(ctx: { registryHost: string; first: string; second: string }) {
  const out: Record<string, { fetchedBytes: number; diskBytes: number }> = {};
  const scratch = mkdtempSync(join(tmpdir(), "berth-bench-big-second-"));
  try {
    // berth: bytes as the registry sent them (blob GETs), disk as the layer store and layout hold them.
    let fetched = 0;
    const counting: typeof fetch = async (input, init) => {
      const res = await globalThis.fetch(input, init);
      const url = typeof input === "string" ? input : input instanceof URL ? input.href : input.url;
      if (url.includes("/blobs/")) fetched += Number(res.headers.get("content-length") ?? 0);
      return res;
    };
    const root = join(scratch, "berth");
    const store = new ImageStore({ root, fetch: counting });
    await store.pull(ctx.first);
    const before = { fetched, disk: diskBytes(join(root, "layers"), join(root, "oci")) };
    await store.pull(ctx.second);
    out.berth = {
      fetchedBytes: fetched - before.fetched,
      diskBytes: diskBytes(join(root, "layers"), join(root, "oci")) - before.disk,
    };
    await removeTree(root);
    // skopeo + umoci as the agent did: one shared blob dir, one rootfs per image.
    // One layout for both images: skopeo skips the blobs it already has there.
    const old = join(scratch, "old");
    const blobs = join(old, "oci", "blobs");
    mkdirSync(old, { recursive: true });
    const copy = async (ref: string, name: string) => {
      await mustExec(
        "skopeo",
        ["copy", "--quiet", "--src-tls-verify=false", `docker://${ref}`, `oci:${old}/oci:${name}`],
        {
          timeoutMs: 1_800_000,
        },
      );
      await mustExec("umoci", ["raw", "unpack", "--image", `${old}/oci:${name}`, `${old}/rootfs-${name}`], {
        timeoutMs: 1_800_000,
      });
    };
    await copy(ctx.first, "first");
    const blobsBefore = diskBytes(blobs);
    const diskBefore = diskBytes(old);
    await copy(ctx.second, "second");
    out["skopeo copy + umoci unpack"] = {
      fetchedBytes: diskBytes(blobs) - blobsBefore,
      diskBytes: diskBytes(old) - diskBefore,
    };
  } finally {
    await removeTree(scratch);
  }
  return out;
}

async function main() {
  const cleanup = new Cleanup();
  const offSignals = cleanup.onSignals();
  try {
    const imageGiB = (spec.bigMib + spec.extraLayers * spec.extraMib + 200) / 1024;
    const need = imageGiB * 5 * GiB; // cache + registry + the largest contender's blobs and dirs, with room
    const free = Math.min(freeBytes(tmpdir()), freeBytes(TEST_CACHE));
    if (free < need) {
      throw new Error(
        `${(free / GiB).toFixed(1)} GiB free, this size needs about ${(need / GiB).toFixed(1)} GiB: pass a smaller --big-mib/--extra-mib`,
      );
    }
    const images = await bigImages(spec);
    const registry = await startTestRegistry({
      after: (fn) => cleanup.add("stop the registry", fn as () => Promise<void>),
    });
    const endpoint = { host: registry.host, insecure: true };
    await pushImage(images.layout, images.first, { endpoint, repository: "berth/big", tag: "1" });
    await pushImage(images.layout, images.second, { endpoint, repository: "berth/big", tag: "2" });
    const ctx = { registryHost: registry.host, ref: `${registry.host}/berth/big:1` };
    console.log(
      `image: ${(images.firstBytes / GiB).toFixed(2)} GiB unpacked in ${2 + spec.extraLayers} layers (one of ${spec.bigMib} MiB random); ${rounds} rounds`,
    );

    const samples = new Map<string, number[]>(contenders.map((c) => [c.name, []]));
    const load: string[] = [];
    const timed = values["second-only"] ? 0 : rounds;
    for (let round = 0; round < timed && !cleanup.interrupted; round++) {
      load.push(execFileSync("uptime", { encoding: "utf8" }).trim());
      for (let k = 0; k < contenders.length; k++) {
        const c = contenders[(round + k) % contenders.length]!;
        const work = mkdtempSync(join(tmpdir(), "berth-bench-big-"));
        cleanup.add(`remove ${work}`, () => removeTree(work));
        const t0 = performance.now();
        await c.run(work, ctx, `berth-bench-big-${process.pid}-${round}-${k}`);
        const ms = performance.now() - t0;
        samples.get(c.name)!.push(ms);
        console.log(`round ${round + 1}: ${c.name}: ${fmtMs(ms)}`);
        await removeTree(work);
        execFileSync("sync");
      }
    }
    const floorSamples = samples.get(FLOOR);
    const floor = floorSamples?.length ? summarize(floorSamples) : undefined;
    const rows = (timed > 0 ? contenders : []).map((c) => {
      const s = summarize(samples.get(c.name)!);
      return [c.name, fmtMs(s.p50), fmtMs(s.p95), fmtRatio(s.p50, floor?.p50)];
    });
    console.log(`\n${formatTable(["time to first output", "p50", "p95", "p50 / floor"], rows)}`);

    const second = only
      ? {}
      : await secondImage({
          registryHost: registry.host,
          first: ctx.ref,
          second: `${registry.host}/berth/big:2`,
        });
    const mib = (n: number) => `${(n / 1024 ** 2).toFixed(0)} MiB`;
    console.log(
      `\n${formatTable(
        ["second image on the same base", "fetched", "disk added"],
        Object.entries(second).map(([k, v]) => [k, mib(v.fetchedBytes), mib(v.diskBytes)]),
      )}`,
    );
    const name = values["second-only"] ? "big-image-second" : only ? "big-image-partial" : "big-image";
    const file = writeResults(name, {
      spec,
      imageBytes: images.firstBytes,
      secondImageOwnBytes: spec.ownMib * 1024 * 1024,
      rounds,
      samples: Object.fromEntries(samples),
      summary: timed
        ? Object.fromEntries(contenders.map((c) => [c.name, summarize(samples.get(c.name)!)]))
        : {},
      second,
      load,
      machine: machineInfo(),
      tools: {
        skopeo: await toolVersion("skopeo"),
        umoci: await toolVersion("umoci"),
        curl: (await toolVersion("curl")).split("\n")[0],
        tar: (await toolVersion("tar")).split("\n")[0],
      },
    });
    console.log(`\nresults: ${file}`);
  } finally {
    offSignals();
    await cleanup.run();
  }
}

await main();
