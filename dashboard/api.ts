// The dashboard's only way to the coordinator: its REST API, same origin,
// with the token the login page saved (Authorization: Bearer), or else the
// single sign-on session's HttpOnly cookie, which the browser sends itself.
// Every call carries the CSRF header: a change made with the cookie needs it
// (docs/sso.md), and another site's page cannot send it.

const KEY = "berth.token";

/** The saved token: this tab's (sessionStorage) first, then a remembered one (localStorage). */
export function savedToken(): string | null {
  return sessionStorage.getItem(KEY) ?? localStorage.getItem(KEY);
}

export function saveToken(token: string, remember: boolean): void {
  sessionStorage.setItem(KEY, token);
  if (remember) localStorage.setItem(KEY, token);
  else localStorage.removeItem(KEY);
}

export function forgetToken(): void {
  sessionStorage.removeItem(KEY);
  localStorage.removeItem(KEY);
}

/** An answer other than 2xx: the status and the catalog error's message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** Calls `path` (/api/v1/...) with the saved token; resolves to the JSON body or rejects with ApiError. */
/** What every call sends: the CSRF header, and the saved token when there is one (else the session cookie goes). */
export function authHeaders(token = savedToken()): Record<string, string> {
  return { "x-berth-csrf": "1", ...(token ? { authorization: `Bearer ${token}` } : {}) };
}

export async function api<T>(path: string, init: RequestInit = {}, token = savedToken()): Promise<T> {
  const headers: Record<string, string> = { accept: "application/json", ...authHeaders(token) };
  const r = await fetch(path, {
    ...init,
    headers: { ...headers, ...(init.headers as Record<string, string>) },
  });
  const text = await r.text();
  let body: unknown = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!r.ok) {
    const err = (body as { error?: { message?: string } } | null)?.error;
    throw new ApiError(r.status, err?.message ?? (text.slice(0, 200) || r.statusText));
  }
  return body as T;
}

export interface Workspace {
  external_id: string;
  name: string;
}

export interface Agent {
  id: string;
  hostname: string;
  /** Its pool (berth agent --pool); null until the coordinator hears from it. */
  pool: string | null;
  state: "ready" | "lost" | "left";
  version: string;
  last_seen_at: string | null;
  capacity: {
    cpu_cores: number;
    memory_bytes: number;
    gpus: {
      available: boolean;
      reason?: string;
      counts: Record<string, number>;
      /** GPUs kept off new work because the driver reported them unhealthy. */
      drained?: { index: number; uuid: string; reason: string; since: string }[];
    };
  } | null;
}

export interface Deployment {
  id: string;
  name: string;
  version: number;
  type: string;
  stub_id: string;
  active: boolean;
  url: string;
  created_at: string;
  updated_at: string;
}

export interface DeploymentDetails extends Deployment {
  containers: number;
  queue_depth: number;
  start_error: string | null;
}

export interface TaskSummary {
  id: string;
  status: string;
  attempt: number;
  stub: { id: string; name: string; type: string };
  container_id: string;
  created_at: string;
  started_at: string | null;
  ended_at: string | null;
  cost: { estimate: number; currency?: string; duration_seconds: number; final: boolean } | null;
}

/** The spec's Task object plus cost and history: no `attempt` of its own (the history has it). */
export interface TaskDetails extends Omit<TaskSummary, "attempt"> {
  history: { status: string; attempt: number; reason: string | null; at: string }[];
  outputs: { id: string; name: string; size: number; created_at: string }[];
}

export interface LogLine {
  id: string;
  timestamp: string;
  stub_id: string;
  container_id: string;
  task_id: string | null;
  stream: "stdout" | "stderr";
  line: string;
}

export interface Series {
  name: string;
  unit: string;
  labels?: Record<string, string>;
  points: [string, number | null][];
}

export interface TimeSeries {
  from: string;
  to: string;
  step_seconds: number;
  series: Series[];
}

/** What the coordinator says of its single sign-on: whether the login page offers it. */
export async function ssoEnabled(): Promise<boolean> {
  try {
    return (await api<{ enabled: boolean }>("/api/v1/auth/config", {}, null)).enabled;
  } catch {
    return false;
  }
}

/** Ends the single sign-on session: the coordinator revokes it and clears its cookie. */
export async function signOutSession(): Promise<void> {
  await fetch("/auth/logout", { method: "POST", headers: { "x-berth-csrf": "1" } });
}
