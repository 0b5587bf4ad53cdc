// Read throughput of a file in a Volume from inside a function container
// against reading the same file on the host, in the same run, interleaved:
// a `berth up` cluster (its volume root is local disk, bind-mounted into the
// container), one file of --mib MiB (default 1024) of random bytes in the
// volume, read with the same Python loop (8 MiB unbuffered reads) on the
// host and in the container. Cold rows drop the page cache before each read
// (both sides read the disk); warm rows read right after a read (the page
// cache). Target: the container reads at >= 70% of the host.
// Usage: node --import tsx bench/volumes/run.ts [--mib 1024] [--rounds 3]
import { createWriteStream, readdirSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { copyFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { Cleanup } from "../lib/cleanup.ts";
import { benchTempDir } from "../lib/fs.ts";
import { startBenchCluster } from "../lib/functions.ts";
import { machineInfo } from "../lib/machine.ts";
import { exec } from "../lib/proc.ts";
import { formatTable, writeResults } from "../lib/stats.ts";

const SDK_DIR = fileURLToPath(new URL("../../sdk/python", import.meta.url));
const APP = fileURLToPath(new URL("./app.py", import.meta.url));

interface Read {
  bytes: number;
  seconds: number;
}

async function writeRandom(path: string, mib: number): Promise<void> {
  const out = createWriteStream(path);
  for (let i = 0; i < mib; i++) {
    if (!out.write(randomBytes(1024 * 1024))) await new Promise<void>((r) => out.once("drain", () => r()));
  }
  await new Promise<void>((resolve, reject) => out.end((e?: Error | null) => (e ? reject(e) : resolve())));
}

function dropCaches(): void {
  // Root only: the page cache is emptied so both sides read the disk.
  writeFileSync("/proc/sys/vm/drop_caches", "3\n");
}

async function main() {
  const { values } = parseArgs({
    options: { mib: { type: "string", default: "1024" }, rounds: { type: "string", default: "3" } },
  });
  const mib = Number(values.mib);
  const rounds = Number(values.rounds);
  if (!Number.isInteger(mib) || mib < 1)
    throw new Error(`--mib must be a positive integer, not ${values.mib}`);
  if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`--rounds must be a positive integer`);
  const cleanup = new Cleanup();
  cleanup.onSignals();
  try {
    const machine = machineInfo();
    const cluster = await startBenchCluster(cleanup);
    const appDir = benchTempDir(cleanup, "berth-bench-volumes-app-");
    copyFileSync(APP, join(appDir, "app.py"));
    await cluster.cli(["volume", "create", "bench"], appDir);
    // berth up's volume root: <data dir>/volumes/<workspace id>/bench.
    const root = join(cluster.dataDir, "volumes");
    const [ws] = readdirSync(root);
    if (!ws) throw new Error(`no workspace directory under ${root}`);
    const file = join(root, ws, "bench", "big.bin");
    console.log(`writing ${mib} MiB of random bytes to ${file}`);
    await writeRandom(file, mib);

    const run = async (mode: "host" | "container"): Promise<Read> => {
      const r = await exec("python3", ["app.py", mode, mode === "host" ? file : "big.bin"], {
        env: { ...process.env, PYTHONPATH: SDK_DIR, SERVICE_TOKEN: cluster.token, BERTH_URL: cluster.url },
        timeoutMs: 900_000,
        cwd: appDir,
      });
      if (r.code !== 0) throw new Error(`app.py ${mode} failed (${r.code}): ${r.stderr.slice(-2000)}`);
      const j = JSON.parse(r.stdout.trim().split("\n").pop() as string) as Read;
      if (j.bytes !== mib * 1024 * 1024) throw new Error(`${mode} read ${j.bytes} bytes, not ${mib} MiB`);
      return j;
    };
    // A first container read starts the container (not measured).
    await run("container");
    const samples: Record<string, number[]> = {
      "host cold": [],
      "container cold": [],
      "host warm": [],
      "container warm": [],
    };
    const mibps = (r: Read) => r.bytes / 1024 / 1024 / r.seconds;
    for (let i = 0; i < rounds; i++) {
      for (const side of i % 2 === 0 ? (["host", "container"] as const) : (["container", "host"] as const)) {
        dropCaches();
        samples[`${side} cold`]!.push(mibps(await run(side)));
        samples[`${side} warm`]!.push(mibps(await run(side)));
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
    const rows = ["cold", "warm"].map((kind) => {
      const host = median(samples[`host ${kind}`]!);
      const ctr = median(samples[`container ${kind}`]!);
      return { kind, hostMiBps: host, containerMiBps: ctr, ratio: ctr / host };
    });
    console.log(
      formatTable(
        ["page cache", "host MiB/s", "container MiB/s", "container / host"],
        rows.map((r) => [
          r.kind,
          r.hostMiBps.toFixed(0),
          r.containerMiBps.toFixed(0),
          `${(100 * r.ratio).toFixed(0)}%`,
        ]),
      ),
    );
    const path = writeResults("volumes", { machine, mib, rounds, samples, rows });
    console.log(`results: ${path}`);
  } finally {
    await cleanup.run();
  }
}

await main();
