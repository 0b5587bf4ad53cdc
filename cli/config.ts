import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { BerthError, describeError } from "../shared/errors.ts";

// ~/.berth/config.json, shared with the Python SDK (sdk/python/berth/client/config.py):
// { "profiles": { "default": { "url": "...", "token": "..." } } }

export interface Profile {
  url?: string;
  token?: string;
  /** The unix socket of the agent `berth up` runs (where `berth agent ps|run|...` find it). */
  agentSocket?: string;
}

export interface ConfigFile {
  profiles: Record<string, Profile>;
}

export const DEFAULT_URL = "http://127.0.0.1:8420";

export function configPath(env: NodeJS.ProcessEnv = process.env): string {
  return env.BERTH_CONFIG || join(env.HOME || homedir(), ".berth", "config.json");
}

export function readConfig(path = configPath()): ConfigFile {
  if (!existsSync(path)) return { profiles: {} };
  try {
    const parsed = JSON.parse(readFileSync(path, "utf8")) as Partial<ConfigFile>;
    return { profiles: parsed.profiles ?? {} };
  } catch (e) {
    throw new BerthError("invalid_request", `cannot read ${path}: ${describeError(e)}`);
  }
}

export function saveProfile(name: string, profile: Profile, path = configPath()): void {
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(name)) {
    throw new BerthError("invalid_request", `profile name ${JSON.stringify(name)} is invalid`);
  }
  const cfg = readConfig(path);
  cfg.profiles[name] = { ...cfg.profiles[name], ...profile };
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(cfg, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, path);
}

/** Removes a profile's token (`berth logout`), keeping its URL and the other profiles. */
export function forgetProfileToken(name: string, path = configPath()): void {
  const cfg = readConfig(path);
  const p = cfg.profiles[name];
  if (!p?.token) return;
  const { token: _gone, ...rest } = p;
  cfg.profiles[name] = rest;
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, `${JSON.stringify(cfg, null, 2)}\n`, { mode: 0o600 });
  renameSync(tmp, path);
}

/** The URL and token in effect: SERVICE_TOKEN / BERTH_URL override the profile. */
export function currentCredentials(env: NodeJS.ProcessEnv = process.env): {
  url: string;
  token?: string;
  profile: string;
} {
  const profile = env.BERTH_PROFILE || "default";
  const p = readConfig(configPath(env)).profiles[profile] ?? {};
  const token = env.SERVICE_TOKEN || p.token;
  return {
    url: (env.BERTH_URL || p.url || DEFAULT_URL).replace(/\/+$/, ""),
    ...(token ? { token } : {}),
    profile,
  };
}

/** The agent socket `berth up` saved in the profile in effect ($BERTH_PROFILE or default), if any. */
export function profileAgentSocket(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const p = readConfig(configPath(env)).profiles[env.BERTH_PROFILE || "default"];
  return typeof p?.agentSocket === "string" && p.agentSocket !== "" ? p.agentSocket : undefined;
}
