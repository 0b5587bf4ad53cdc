import { BerthError, type ErrorCode, CATALOG } from "../shared/errors.ts";
import { currentCredentials } from "./config.ts";

/** Calls the coordinator's REST API with the configured credentials. */
export class ApiClient {
  constructor(
    readonly url: string,
    private readonly token?: string,
  ) {}

  static fromEnv(env: NodeJS.ProcessEnv = process.env): ApiClient {
    const c = currentCredentials(env);
    return new ApiClient(c.url, c.token);
  }

  async request<T>(method: string, path: string, body?: unknown): Promise<T> {
    if (!this.token) {
      throw new BerthError(
        "unauthenticated",
        "no token: run `berth configure default --token T`, or set SERVICE_TOKEN",
      );
    }
    let res: Response;
    try {
      res = await fetch(`${this.url}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(body !== undefined ? { "content-type": "application/json" } : {}),
        },
        ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
        signal: AbortSignal.timeout(30_000),
      });
    } catch (e) {
      throw new BerthError("unavailable", `cannot reach ${this.url}: ${(e as Error).message}`);
    }
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : {};
    } catch {
      throw new BerthError("internal", `${this.url} answered HTTP ${res.status} with a non-JSON body`);
    }
    if (!res.ok) {
      const err = (json as { error?: { code?: string; message?: string } }).error;
      const code = (err?.code && err.code in CATALOG ? err.code : "internal") as ErrorCode;
      throw new BerthError(code, err?.message ?? `HTTP ${res.status}`);
    }
    return json as T;
  }
}
