// Starts bare-proxy.mjs (beside this file) in its own process: the floor that
// one more process hop costs on this machine, timed beside berth's own hop
// (the /v1 gateway, /endpoint/) and the server called directly.

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { Cleanup } from "./cleanup.ts";

const SCRIPT = fileURLToPath(new URL("./bare-proxy.mjs", import.meta.url));

/** The proxy's loopback port; it forwards every request to upstreamHost:upstreamPort and stops with `cleanup`. */
export async function startBareProxy(
  cleanup: Cleanup,
  upstreamHost: string,
  upstreamPort: number,
): Promise<number> {
  const proxy = spawn(process.execPath, [SCRIPT, upstreamHost, String(upstreamPort)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  cleanup.add("stop the bare proxy", () => {
    proxy.kill();
  });
  const port = await new Promise<string>((resolve, reject) => {
    proxy.once("exit", (code) => reject(new Error(`the bare proxy exited (${code})`)));
    createInterface({ input: proxy.stdout as NodeJS.ReadableStream }).once("line", resolve);
  });
  return Number(port);
}
