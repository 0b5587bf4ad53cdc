// berth up's cluster registry (docs/images.md, "The cluster registry"):
// Debian's docker-registry (distribution v2) on loopback (with --advertise: on
// that address over TLS, a certificate of the cluster CA), filesystem storage
// under the data dir, htpasswd (bcrypt) auth with credentials made at the
// first start and kept in <data>/registry/registry.json (0600), deletes
// enabled so the coordinator's image GC can remove manifests. Blobs of
// deleted manifests are freed by `docker-registry garbage-collect`, run
// before each start (the registry must not serve while it runs).

import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { ClusterRegistryAccess } from "../../shared/fleet.ts";
import { freePort, waitFor } from "../../shared/net.ts";
import { fetchTrusting } from "../../shared/tls-fetch.ts";
import { registryConfigYaml } from "./registry-config.ts";

export const REGISTRY_COMMAND = "docker-registry";

interface SavedRegistry {
  port: number;
  username: string;
  password: string;
}

export interface UpRegistry {
  access: ClusterRegistryAccess;
  process: ChildProcess;
  exited: Promise<number | null>;
  stop(): Promise<void>;
}

/** Makes (once) and starts the registry; rejects naming the cause (and the log file) when it does not come up. */
export async function startUpRegistry(
  dataDir: string,
  opts: {
    port?: number;
    /** berth up --advertise: listen on this address over HTTPS (a cluster CA certificate) instead of loopback. */
    advertise?: { host: string; tls: { certFile: string; keyFile: string }; caPem: string };
  } = {},
): Promise<UpRegistry> {
  const dir = join(dataDir, "registry");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const savedPath = join(dir, "registry.json");
  const saved: Partial<SavedRegistry> = existsSync(savedPath)
    ? (JSON.parse(readFileSync(savedPath, "utf8")) as SavedRegistry)
    : {};
  // The port is part of every pushed image's reference, so it is kept across restarts.
  const reg: SavedRegistry = {
    port: opts.port ?? saved.port ?? (await freePort()),
    username: saved.username ?? "berth-cluster",
    password: saved.password ?? randomBytes(24).toString("base64url"),
  };
  writeFileSync(savedPath, `${JSON.stringify(reg, null, 2)}\n`, { mode: 0o600 });
  // distribution's htpasswd accepts bcrypt only. Loaded here, not at the top: `berth --help` never needs it.
  // Cost 5, not the usual 10: the registry checks the hash on every request (a push is ~20), and at
  // cost 10 that was ~0.1 s each, half of a cold build. bcrypt's cost guards guessable passwords; this
  // one is 24 random bytes, so no cost makes guessing it any harder.
  const { default: bcrypt } = await import("bcryptjs");
  writeFileSync(join(dir, "htpasswd"), `${reg.username}:${bcrypt.hashSync(reg.password, 5)}\n`, {
    mode: 0o600,
  });
  const config = join(dir, "config.yml");
  writeFileSync(
    config,
    registryConfigYaml({
      port: reg.port,
      dataDir: join(dir, "data"),
      htpasswd: { path: join(dir, "htpasswd"), realm: "berth-cluster" },
      ...(opts.advertise ? { host: opts.advertise.host, tls: opts.advertise.tls } : {}),
    }),
    { mode: 0o600 },
  );
  const logPath = join(dir, "registry.log");
  // Nothing to collect before the first push (and garbage-collect fails on a storage it never saw).
  if (existsSync(join(dir, "data", "docker", "registry", "v2", "repositories")))
    await garbageCollect(config, logPath);

  const log = createWriteStream(logPath, { flags: "a" });
  const child = spawn(REGISTRY_COMMAND, ["serve", config], { stdio: ["ignore", "pipe", "pipe"] });
  child.stdout?.pipe(log);
  child.stderr?.pipe(log);
  let exitCode: number | null | undefined;
  const exited = new Promise<number | null>((resolve) => {
    const end = (code: number | null) => {
      exitCode = code;
      resolve(code);
    };
    child.once("error", () => end(-1));
    child.once("exit", (code) => end(code));
  });
  const stop = async () => {
    if (exitCode === undefined) {
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(t);
    }
    log.end();
  };
  const adv = opts.advertise;
  const url = adv
    ? `https://${adv.host.includes(":") ? `[${adv.host}]` : adv.host}:${reg.port}`
    : `http://127.0.0.1:${reg.port}`;
  const probe = fetchTrusting(adv?.caPem);
  try {
    await waitFor(
      async () => {
        if (exitCode === -1)
          throw new Error(
            `cannot run ${REGISTRY_COMMAND}: install Debian's docker-registry package (scripts/ensure-deps.sh), or give berth up --registry URL`,
          );
        if (exitCode !== undefined)
          throw new Error(`${REGISTRY_COMMAND} exited (code ${exitCode}); see ${logPath}`);
        const r = await probe(`${url}/v2/`, { signal: AbortSignal.timeout(2000) });
        await r.body?.cancel();
        return r.status === 401;
      },
      { timeoutMs: 30_000, intervalMs: 100, what: `the cluster registry on ${url}` },
    );
  } catch (e) {
    await stop();
    throw e;
  }
  return {
    access: { url, username: reg.username, password: reg.password, ...(adv ? { caPem: adv.caPem } : {}) },
    process: child,
    exited,
    stop,
  };
}

/** Frees the blobs no manifest references any more (images the coordinator's GC deleted). */
function garbageCollect(config: string, logPath: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const out = createWriteStream(logPath, { flags: "a" });
    const gc = spawn(REGISTRY_COMMAND, ["garbage-collect", config], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    gc.stdout?.pipe(out);
    gc.stderr?.pipe(out);
    gc.once("error", (e) =>
      reject(
        new Error(
          `cannot run ${REGISTRY_COMMAND} (${(e as NodeJS.ErrnoException).code ?? e.message}): install Debian's docker-registry package (scripts/ensure-deps.sh), or give berth up --registry URL`,
        ),
      ),
    );
    gc.once("exit", (code) => {
      out.end();
      if (code === 0) resolve();
      else reject(new Error(`${REGISTRY_COMMAND} garbage-collect failed (code ${code}); see ${logPath}`));
    });
  });
}
