// A small client of the OCI distribution API (docs/images.md, "The cluster
// registry"): what the agent needs to push a built image (blob check, blob
// upload, manifest put) and to pull one (manifest and blobs, streamed:
// agent/images/registry-pull.ts), and the coordinator to garbage-collect one
// (manifest delete). Basic auth and the Bearer token challenge both work, so an operator's own registry (Harbor, GitLab,
// a cloud registry's token endpoint) serves as well as Debian's
// docker-registry with htpasswd. Credentials never appear in an error.

import { BerthError } from "./errors.ts";

export interface RegistryEndpoint {
  /** host[:port], the registry part of an image reference. */
  host: string;
  /** Plain HTTP (loopback, or a registry the operator listed as insecure). */
  insecure: boolean;
  credentials?: { username: string; password: string };
}

export interface RegistryRequest {
  method: "GET" | "HEAD" | "POST" | "PUT" | "PATCH" | "DELETE";
  /** Path from /v2/ on, or an absolute upload URL the registry returned. */
  path: string;
  headers?: Record<string, string>;
  body?: BodyInit;
  /** For a streamed body. */
  duplex?: "half";
  signal?: AbortSignal;
}

const REPO_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$/;

/** Whether `name` is a valid repository path (lowercase components separated by "/"). */
export const isRepositoryName = (name: string): boolean => name.length <= 255 && REPO_RE.test(name);

/** A registry endpoint with its authorization, fetched once per scope and reused. */
export class RegistryClient {
  private readonly tokens = new Map<string, string>();
  private readonly base: string;

  constructor(
    private readonly ep: RegistryEndpoint,
    /** The HTTP client (a test counts requests through it). @default globalThis.fetch */
    private readonly send: typeof fetch = globalThis.fetch,
  ) {
    this.base = `${ep.insecure ? "http" : "https"}://${ep.host}`;
  }

  get host(): string {
    return this.ep.host;
  }

  /**
   * One request with the authorization `scope` ("repository:NAME:push,pull")
   * needs. A Bearer challenge is answered once (a token for the scope) and the
   * request is repeated; a body that is a stream cannot be repeated, so callers
   * that stream call `authorize(scope)` first.
   */
  async request(scope: string, r: RegistryRequest): Promise<Response> {
    const url = r.path.startsWith("http") ? r.path : `${this.base}${r.path}`;
    const send = () =>
      this.fetch(url, {
        method: r.method,
        headers: { ...(r.headers ?? {}), ...this.authHeader(scope) },
        ...(r.body !== undefined ? { body: r.body } : {}),
        ...(r.duplex ? { duplex: r.duplex } : {}),
        ...(r.signal ? { signal: r.signal } : {}),
      } as RequestInit);
    let res = await send();
    if (res.status === 401 && !this.tokens.has(scope) && isRepeatable(r.body)) {
      const challenge = res.headers.get("www-authenticate") ?? "";
      await res.body?.cancel();
      if (await this.answer(scope, challenge, r.signal)) res = await send();
    }
    if (res.status === 401) {
      await res.body?.cancel();
      throw new BerthError(
        "registry_auth_failed",
        this.ep.credentials
          ? `the registry ${this.ep.host} refused the credentials it was given`
          : `the registry ${this.ep.host} needs credentials and none were given`,
        { registry: this.ep.host },
      );
    }
    return res;
  }

  /** Learns how the registry wants `scope` authorized (GET /v2/ and its challenge), so later requests need no retry. */
  async authorize(scope: string, signal?: AbortSignal): Promise<void> {
    if (this.tokens.has(scope)) return;
    const res = await this.fetch(`${this.base}/v2/`, {
      headers: this.authHeader(scope),
      ...(signal ? { signal } : {}),
    });
    await res.body?.cancel();
    if (res.status === 401) await this.answer(scope, res.headers.get("www-authenticate") ?? "", signal);
  }

  private authHeader(scope: string): Record<string, string> {
    const token = this.tokens.get(scope);
    if (token) return { authorization: `Bearer ${token}` };
    const c = this.ep.credentials;
    if (!c) return {};
    return { authorization: `Basic ${Buffer.from(`${c.username}:${c.password}`).toString("base64")}` };
  }

  /** Answers a Bearer challenge with a token for `scope`; false for a Basic one (already sent). */
  private async answer(scope: string, challenge: string, signal?: AbortSignal): Promise<boolean> {
    if (!/^bearer\s/i.test(challenge)) return false;
    const params = Object.fromEntries(
      [...challenge.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]?.toLowerCase() ?? "", m[2] ?? ""]),
    );
    if (!params.realm) return false;
    const u = new URL(params.realm);
    if (params.service) u.searchParams.set("service", params.service);
    u.searchParams.set("scope", scope);
    const c = this.ep.credentials;
    const res = await this.fetch(u.toString(), {
      headers: c
        ? { authorization: `Basic ${Buffer.from(`${c.username}:${c.password}`).toString("base64")}` }
        : {},
      ...(signal ? { signal } : {}),
    });
    if (!res.ok) {
      await res.body?.cancel();
      throw new BerthError(
        "registry_auth_failed",
        `the registry ${this.ep.host}'s token service answered HTTP ${res.status} for ${scope}`,
        { registry: this.ep.host },
      );
    }
    const body = (await res.json().catch(() => ({}))) as { token?: string; access_token?: string };
    const token = body.token ?? body.access_token;
    if (!token) throw new BerthError("registry_auth_failed", `the registry ${this.ep.host} gave no token`);
    this.tokens.set(scope, token);
    return true;
  }

  private async fetch(url: string, init: RequestInit): Promise<Response> {
    try {
      return await this.send(url, init);
    } catch (e) {
      if (init.signal?.aborted)
        throw new BerthError("cancelled", `the request to ${this.ep.host} was cancelled`);
      const cause = (e as { cause?: { code?: string; message?: string } }).cause;
      throw new BerthError(
        "unavailable",
        `cannot reach the registry ${this.ep.host}: ${cause?.code ?? cause?.message ?? (e as Error).message}`,
        { registry: this.ep.host },
      );
    }
  }

  /** Deletes a manifest by digest (the registry must allow deletes); false when it was not there. */
  async deleteManifest(repository: string, digest: string, signal?: AbortSignal): Promise<boolean> {
    const res = await this.request(`repository:${repository}:delete`, {
      method: "DELETE",
      path: `/v2/${repository}/manifests/${digest}`,
      ...(signal ? { signal } : {}),
    });
    await res.body?.cancel();
    if (res.status === 202 || res.status === 200) return true;
    if (res.status === 404) return false;
    throw await registryAnswerError(res, `deleting ${repository}@${digest} from ${this.ep.host}`);
  }
}

/** A registry's error answer as a BerthError quoting its first error message. */
export async function registryAnswerError(res: Response, what: string): Promise<BerthError> {
  const text = await res.text().catch(() => "");
  let detail = text.slice(0, 300);
  try {
    const e = (JSON.parse(text) as { errors?: { code?: string; message?: string }[] }).errors?.[0];
    if (e) detail = `${e.code ?? ""} ${e.message ?? ""}`.trim();
  } catch {}
  const code =
    res.status === 403 ? "registry_auth_failed" : res.status === 405 ? "failed_precondition" : "unavailable";
  return new BerthError(
    code,
    `${what}: the registry answered HTTP ${res.status}${detail ? ` (${detail})` : ""}`,
  );
}

function isRepeatable(body: BodyInit | undefined): boolean {
  return body === undefined || typeof body === "string" || body instanceof Uint8Array;
}

/** Parses "[user:pass@]host[:port]" or "http(s)://host[:port]" into a host and whether it is plain HTTP. */
export function parseRegistryUrl(url: string): { host: string; insecure: boolean } {
  const m = /^(?:(https?):\/\/)?([A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::(\d{1,5}))?\/?$/.exec(url.trim());
  if (!m?.[2])
    throw new BerthError(
      "invalid_request",
      `registry ${JSON.stringify(url)} must be http://host:port, https://host[:port] or host[:port]`,
    );
  return { host: m[3] ? `${m[2]}:${m[3]}` : m[2], insecure: m[1] === "http" };
}
