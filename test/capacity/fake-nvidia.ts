// Test setup for the capacity suites: a PATH with the fake nvidia-smi /
// nvidia-ctk from test/fixtures/nvidia-smi, and device directories.

import { execFileSync } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { tempDir } from "../helpers/env.ts";

export const FIXTURES = fileURLToPath(new URL("../fixtures/nvidia-smi/", import.meta.url));

type AfterHook = { after: (fn: () => void) => void };

/** A fresh bin directory holding links to the chosen fake tools (none: a host without a driver). */
export function fakeBin(t: AfterHook, tools: ("nvidia-smi" | "nvidia-ctk")[]): string {
  const bin = join(tempDir(t, "berth-fakebin-"), "bin");
  mkdirSync(bin);
  for (const tool of tools) linkTool(bin, tool);
  return bin;
}

export function linkTool(bin: string, tool: "nvidia-smi" | "nvidia-ctk"): void {
  symlinkSync(join(FIXTURES, tool), join(bin, tool));
}

/** An environment whose PATH finds the fake tools first and no others from the NVIDIA stack. */
export function fakeEnv(bin: string, fixture: string): NodeJS.ProcessEnv {
  return { PATH: `${bin}:/usr/bin:/bin`, BERTH_FAKE_NVIDIA_FIXTURE: fixture };
}

/** A device directory of empty regular files: enough for the probe, which only checks presence. */
export function listingDevDir(t: AfterHook, names: string[]): string {
  const dev = join(tempDir(t, "berth-fakedev-"), "dev");
  mkdirSync(dev);
  for (const n of names) {
    mkdirSync(dirname(join(dev, n)), { recursive: true });
    writeFileSync(join(dev, n), "");
  }
  return dev;
}

export interface CharNode {
  name: string;
  major: number;
  minor: number;
}

/** Real character device nodes made with mknod (needs root); removed with the temp dir. */
export function mknodDevDir(t: AfterHook, nodes: CharNode[]): string {
  const dev = join(tempDir(t, "berth-chardev-"), "dev");
  mkdirSync(dev);
  for (const n of nodes) {
    const path = join(dev, n.name);
    mkdirSync(dirname(path), { recursive: true });
    execFileSync("mknod", ["-m", "666", path, "c", String(n.major), String(n.minor)]);
  }
  return dev;
}

/** The nodes of a host with `gpus` GPUs: major 195 as the nvidia module registers, uvm on a dynamic major. */
export function nvidiaNodes(gpus: number): CharNode[] {
  return [
    { name: "nvidiactl", major: 195, minor: 255 },
    { name: "nvidia-modeset", major: 195, minor: 254 },
    { name: "nvidia-uvm", major: 509, minor: 0 },
    { name: "nvidia-uvm-tools", major: 509, minor: 1 },
    ...Array.from({ length: gpus }, (_, i) => ({ name: `nvidia${i}`, major: 195, minor: i })),
  ];
}
