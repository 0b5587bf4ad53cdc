// One real container host per test file: a local registry with the test
// image, an ImageStore, a Network with names of its own, a runtime on a temp
// root. Everything is removed in t.after, pass or fail.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import { ContainerHost, type ContainerHostOptions, type HostEvent } from "../../agent/host/index.ts";
import { ImageStore } from "../../agent/images/index.ts";
import type { Network, NetworkOptions } from "../../agent/network/index.ts";
import type { ExecSession, LogEntry } from "../../api/index.ts";
import { ContainerRuntime } from "../../agent/runtime/index.ts";
import { mountsUnder } from "../../agent/runtime/rootfs.ts";
import { loopsUnder } from "../helpers/loops.ts";
import { unmountLeftovers } from "../helpers/mounts.ts";
import { Runc } from "../../agent/runtime/runc.ts";
import { waitFor } from "../../shared/net.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";
import {
  PROBE,
  startTestNetwork,
  sweepAfter,
  Teardown,
  type TestNames,
  testNames,
} from "../network/helpers.ts";

export const HOST_COMMANDS = ["runc", "skopeo", "umoci", "docker-registry", "ip", "nft", "python3"];

export interface HostHarness {
  dir: string;
  imageRef: string;
  names: TestNames;
  net: Network;
  down: Teardown;
  host: ContainerHost;
  images: ImageStore;
  events: HostEvent[];
  logs: LogEntry[];
  allowedRoot: string;
  /** A second host on the same roots (the first one's timers closed, containers left running). */
  restart(): Promise<ContainerHost>;
  /** The runtime of the current host (cgroups, runc names). */
  runtime(): ContainerRuntime;
  exitOf(id: string, timeoutMs?: number): Promise<Extract<HostEvent, { type: "exit" }>>;
}

export const MiB = 1024 * 1024;

/**
 * A temp root for a container host; at teardown, the runc containers left
 * under its state dir are deleted, its mounts unmounted and the dir removed.
 */
export function hostTempDir(down: Teardown, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const runcRoot = join(dir, "containers", ".runc");
  down.defer(() => {
    try {
      const left = JSON.parse(
        execFileSync("runc", ["--root", runcRoot, "list", "--format", "json"]).toString() || "null",
      ) as { id: string }[] | null;
      for (const c of left ?? [])
        execFileSync("runc", ["--root", runcRoot, "delete", "--force", c.id], { stdio: "ignore" });
    } catch {
      // no runc state dir
    }
    unmountLeftovers([dir], [join(dir, "containers")]);
    rmSync(dir, { recursive: true, force: true });
  });
  return dir;
}

export interface HostHarnessOptions {
  /** More network options, given the test's names (the default allows the outside namespace's subnets). */
  network?: (names: TestNames) => Partial<NetworkOptions>;
  /** A volume root under the harness's dir (volumes/): containers may then ask for volumes. */
  volumes?: boolean;
  /** More host options (pre-warmed sandboxes, a logger); the test image is then the default image. */
  host?: Partial<ContainerHostOptions>;
}

export async function hostHarness(t: TestContext, ho: HostHarnessOptions = {}): Promise<HostHarness> {
  const down = new Teardown(t);
  // Deferred first, so it runs last: after the host and network are gone.
  const dir = hostTempDir(down, "berth-host-");
  const runcRoot = join(dir, "containers", ".runc");
  const names = await testNames();
  sweepAfter(down, names);
  const { net } = await startTestNetwork(t, down, names, {
    dataDir: join(dir, "net"),
    ...ho.network?.(names),
  });
  const registry = await startTestRegistry(t);
  const imageRef = await pushTestImage(registry);
  const allowedRoot = join(dir, "allowed");
  mkdirSync(allowedRoot);
  const events: HostEvent[] = [];
  const logs: LogEntry[] = [];
  let runtime: ContainerRuntime | undefined;
  const options = (images: ImageStore): ContainerHostOptions => ({
    root: join(dir, "host"),
    images,
    network: net,
    runtime: (hooks) =>
      (runtime = new ContainerRuntime({ root: join(dir, "containers"), pollIntervalMs: 100, ...hooks })),
    capacity: { cpuCores: 2, memoryBytes: 4 * 1024 * MiB },
    allowedMountRoots: [allowedRoot],
    ...(ho.volumes ? { volumeRoot: join(dir, "volumes") } : {}),
    onEvent: (e) => events.push(e),
    onLog: (l) => logs.push(l),
    ...ho.host,
  });
  const newImages = () =>
    new ImageStore({ root: join(dir, "images"), ...(ho.host ? { defaultImage: imageRef } : {}) });
  const images = newImages();
  const h: HostHarness = {
    dir,
    imageRef,
    names,
    net,
    down,
    host: await ContainerHost.start(options(images)),
    images,
    events,
    logs,
    allowedRoot,
    restart: async () => {
      h.host.close();
      h.images = newImages();
      h.host = await ContainerHost.start(options(h.images));
      return h.host;
    },
    runtime: () => runtime as ContainerRuntime,
    exitOf: (id, timeoutMs = 30_000) =>
      waitFor(() => events.find((e) => e.type === "exit" && e.containerId === id) as never, {
        timeoutMs,
        intervalMs: 20,
        what: `exit of ${id}`,
      }),
  };
  // Runs before the network is destroyed (LIFO): every container removed through the host.
  down.defer(async () => {
    for (const c of await h.host.listContainers())
      await h.host.stopContainer(c.id, { graceMs: 0, remove: true });
    await h.host.drainWarmRunners();
    h.host.close();
    assert.deepEqual(await new Runc("runc", runcRoot).list(), [], "no runc container may be left");
    assert.deepEqual(net.list(), [], "no network lease may be left");
    assert.deepEqual(mountsUnder(dir), [], "no mount may be left");
    assert.deepEqual(loopsUnder(dir), [], "no loop device (container disk) may be left");
  });
  return h;
}

/** Runs an exec to completion: its stdout, stderr and exit code. */
export async function execAll(
  s: ExecSession,
  stdin?: string,
): Promise<{ stdout: string; stderr: string; code: number }> {
  if (stdin !== undefined) s.writeStdin(new TextEncoder().encode(stdin));
  s.closeStdin();
  const out = { stdout: "", stderr: "" };
  const dec = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  const reading = (async () => {
    for await (const c of s.output) out[c.stream] += dec[c.stream].decode(c.data, { stream: true });
  })();
  const code = await withTimeout(s.exit, 30_000, "exec exit");
  await withTimeout(reading, 10_000, "exec output");
  return { ...out, code };
}

export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** A TCP probe run inside the container with exec. */
export { PROBE };
