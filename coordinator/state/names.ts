// Names of a workspace's queues, maps and signals (docs/queues.md). A name is
// one NATS subject token and part of a KV key, so it is kept to letters,
// digits, `_` and `-`; the workspace comes from the caller's token or, in a
// container, from the agent, never from the name.

import { BerthError } from "../../shared/errors.ts";

export const OBJECT_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,62}$/;

export type ObjectKind = "queue" | "map" | "signal";

/** The name as given, or invalid_request naming what is wrong with it. */
export function checkObjectName(kind: ObjectKind, name: unknown): string {
  if (typeof name !== "string" || !OBJECT_NAME_RE.test(name))
    throw new BerthError(
      "invalid_request",
      `${kind} name ${JSON.stringify(name)} is not valid: 1 to 63 letters, digits, "_" or "-", starting with a letter or digit`,
    );
  return name;
}

/** Workspace ids are `ws-` plus base32; anything else here is a programming error upstream. */
export function checkWorkspaceId(workspaceId: string): string {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(workspaceId))
    throw new BerthError("invalid_request", `workspace id ${JSON.stringify(workspaceId)} is not valid`);
  return workspaceId;
}

/** What the JetStream API error says, for mapping to berth's codes. */
export function jsErrorText(e: unknown): string {
  const api = (e as { api_error?: { description?: string } })?.api_error;
  return (api?.description ?? (e as Error)?.message ?? String(e)).toLowerCase();
}

/** True for JetStream's "stream not found" / "no message found" / "key not found" answers. */
export function isJsNotFound(e: unknown): boolean {
  const code = (e as { api_error?: { err_code?: number } })?.api_error?.err_code;
  if (code === 10059 || code === 10037) return true;
  const t = jsErrorText(e);
  return t.includes("not found") || t.includes("no message found");
}
