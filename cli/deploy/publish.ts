// One `berth deploy` (or one serve re-sync): describe the object with its
// code archive, upload the archive unless the coordinator has it, register
// the deployment. The archive lives in a temp dir that is always removed.

import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { ApiClient } from "../api-client.ts";
import { type Described, describeTarget } from "./describe.ts";

/** A deployment record (docs/deployments.md), as the REST and gateway routes answer it. */
export interface DeploymentJson {
  id: string;
  name: string;
  version: number;
  type: string;
  stub_id: string;
  active: boolean;
  serve: boolean;
  url: string;
  created_at: string;
  updated_at: string;
  /** When the deployment last got a request; absent until the coordinator records it. */
  last_request_at?: string | null;
}

export interface Published {
  described: Described;
  deployment: DeploymentJson;
  /** Whether the archive had to be sent (the coordinator did not have it yet). */
  uploaded: boolean;
  /** The code archive's size in bytes and how many files it holds. */
  code: { bytes: number; files: number };
  /** What the coordinator warns about (no host can ever run it, and why). */
  warnings: string[];
}

export interface PublishOptions {
  name?: string;
  serve?: boolean;
  env?: NodeJS.ProcessEnv;
  stderr?: NodeJS.WritableStream;
}

/** Makes sure the coordinator holds the archive at path; returns whether it was sent. */
export async function uploadArchive(api: ApiClient, sha256: string, path: string): Promise<boolean> {
  const objectPath = `/api/v1/gateway/objects/${sha256}`;
  const have = await api.gateway<{ exists: boolean }>("GET", objectPath);
  if (have.exists) return false;
  await api.gatewayUpload(objectPath, readFileSync(path));
  return true;
}

export async function publish(api: ApiClient, target: string, o: PublishOptions = {}): Promise<Published> {
  const dir = mkdtempSync(join(tmpdir(), "berth-deploy-"));
  try {
    const archive = join(dir, "code.tar.gz");
    const described = await describeTarget(target, {
      archive,
      ...(o.name !== undefined ? { name: o.name } : {}),
      ...(o.env ? { env: o.env } : {}),
      ...(o.stderr ? { stderr: o.stderr } : {}),
    });
    const code = { bytes: statSync(archive).size, files: described.archive_files ?? 0 };
    const uploaded = await uploadArchive(api, described.extra.code_sha256, archive);
    if (described.type === "bot") await createTransitionStubs(api, described);
    const answer = await api.gateway<{ deployment: DeploymentJson; warnings?: string[] }>(
      "POST",
      "/api/v1/gateway/deployments",
      {
        name: described.name,
        type: described.type,
        config: described.config,
        extra: described.extra,
        ...(o.serve ? { serve: true } : {}),
      },
    );
    return { described, deployment: answer.deployment, uploaded, code, warnings: answer.warnings ?? [] };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface DescribedTransition {
  name: string;
  stub?: { name: string; type: string; config: unknown; extra: unknown };
  stub_id?: string;
}

/**
 * A bot's transitions are function stubs of their own (docs/bots.md): each is
 * created (or updated) first and the bot's definition names it by stub_id.
 */
async function createTransitionStubs(api: ApiClient, described: Described): Promise<void> {
  const bot = described.extra.bot as { transitions?: DescribedTransition[] } | undefined;
  for (const t of bot?.transitions ?? []) {
    if (!t.stub) continue;
    const r = await api.gateway<{ stub: { id: string } }>("POST", "/api/v1/gateway/stubs", t.stub);
    t.stub_id = r.stub.id;
    delete t.stub;
  }
}

/** `1.2 MiB`: sizes as code sync prints them (sdk/python/berth/client/sync.py human_size). */
export function humanSize(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1024 * 1024)).toFixed(1)} MiB`;
}

/** The line `berth deploy` prints about the code it synced. */
export function codeLine(p: Pick<Published, "code" | "uploaded">): string {
  const what = `code: ${humanSize(p.code.bytes)} (${p.code.files} files)`;
  return p.uploaded ? `${what}, uploaded` : `${what}, already on the coordinator`;
}

/** How to call what was deployed, one line per way. */
export function invocationLines(d: DeploymentJson, described: Described): string[] {
  switch (described.type) {
    case "endpoint":
      return [`POST JSON to ${d.url}`];
    case "asgi":
      return [`serving HTTP at ${d.url}`];
    case "realtime":
      return [`websocket at ${d.url.replace(/^http/, "ws")}`];
    case "taskqueue":
      return [`POST JSON to ${d.url} to enqueue a task (answers {"task_id"}); results through the task API`];
    case "pod":
      return [`serving HTTP at ${d.url} (proxied to the pod's first port)`];
    case "bot":
      return [`bot sessions: websocket at ${d.url.replace(/^http/, "ws")}/session (docs/bots.md)`];
    case "schedule":
      return [`runs on the schedule ${described.extra.when ?? "?"} while active`];
    default:
      return d.url ? [d.url] : [];
  }
}
