import { BerthError, type ErrorCode, CATALOG } from "../shared/errors.ts";
import { currentCredentials } from "./config.ts";

interface SendOptions {
  body?: unknown;
  /** Raw bytes sent as they are (uploads); `body` is sent as JSON otherwise. */
  bytes?: Uint8Array<ArrayBuffer>;
  /** A streamed body (uploads of any size), sent chunked. */
  stream?: ReadableStream<Uint8Array>;
  contentType?: string;
  timeoutMs?: number;
  signal?: AbortSignal;
}

const asErrorCode = (code: string | undefined): ErrorCode =>
  (code && code in CATALOG ? code : "internal") as ErrorCode;

/** Calls the coordinator's REST API with the configured credentials. */
export class ApiClient {
  constructor(
    readonly url: string,
    private readonly token?: string,
    /** Calls the coordinator's public routes without a token (`berth login` before it has one). */
    private readonly o: { anonymous?: boolean } = {},
  ) {}

  static fromEnv(env: NodeJS.ProcessEnv = process.env): ApiClient {
    const c = currentCredentials(env);
    return new ApiClient(c.url, c.token);
  }

  /** timeoutMs: how long to wait for the answer (0: no limit). @default 30000 */
  async request<T>(method: string, path: string, body?: unknown, o: { timeoutMs?: number } = {}): Promise<T> {
    return this.json<T>(await this.send(method, path, { ...(body !== undefined ? { body } : {}), ...o }));
  }

  /**
   * A gateway route (`/api/v1/gateway/...`): these answer HTTP 200 with
   * `{ok: false, error}` on failure, which becomes the BerthError it names.
   */
  async gateway<T>(method: string, path: string, body?: unknown): Promise<T> {
    return gatewayResult<T>(await this.request<unknown>(method, path, body));
  }

  /** Uploads bytes to a gateway route (code archives); large uploads get up to 10 minutes. */
  async gatewayUpload<T>(path: string, bytes: Uint8Array<ArrayBuffer>): Promise<T> {
    const res = await this.send("PUT", path, {
      bytes,
      contentType: "application/octet-stream",
      timeoutMs: 600_000,
    });
    return gatewayResult<T>(await this.json<unknown>(res));
  }

  /**
   * Opens a streaming response (NDJSON logs; with `body`, a POST's NDJSON
   * progress): no timeout, ended by `signal`. An error answer (JSON, gateway
   * or REST style) is thrown as its BerthError.
   */
  async openStream(path: string, signal: AbortSignal, body?: unknown): Promise<Response> {
    const res = await this.send(body === undefined ? "GET" : "POST", path, {
      signal,
      timeoutMs: 0,
      ...(body !== undefined ? { body } : {}),
    });
    const type = res.headers.get("content-type") ?? "";
    if (!res.ok || type.startsWith("application/json")) {
      gatewayResult(await this.json<unknown>(res));
      throw new BerthError("internal", `${this.url}${path} answered HTTP ${res.status} instead of a stream`);
    }
    return res;
  }

  /** Streams a request body (volume uploads): no timeout; an error answer is thrown as its BerthError. */
  async uploadStream<T>(path: string, body: ReadableStream<Uint8Array>): Promise<T> {
    return this.json<T>(
      await this.send("PUT", path, { stream: body, contentType: "application/octet-stream", timeoutMs: 0 }),
    );
  }

  /** A streamed download (volume files): the response, or its error answer thrown as a BerthError. */
  async download(path: string): Promise<Response> {
    const res = await this.send("GET", path, { timeoutMs: 0 });
    if (!res.ok) await this.json<unknown>(res);
    return res;
  }

  private async send(method: string, path: string, o: SendOptions): Promise<Response> {
    if (!this.token && !this.o.anonymous) {
      throw new BerthError(
        "unauthenticated",
        "no token: run `berth configure default --token T`, or set SERVICE_TOKEN",
      );
    }
    const timeoutMs = o.timeoutMs ?? 30_000;
    const signals = [o.signal, timeoutMs > 0 ? AbortSignal.timeout(timeoutMs) : undefined].filter(
      (s): s is AbortSignal => s !== undefined,
    );
    const contentType = o.contentType ?? (o.body !== undefined ? "application/json" : undefined);
    try {
      return await fetch(`${this.url}${path}`, {
        method,
        headers: {
          ...(this.token ? { authorization: `Bearer ${this.token}` } : {}),
          ...(contentType ? { "content-type": contentType } : {}),
        },
        ...(o.stream !== undefined
          ? { body: o.stream, duplex: "half" as const }
          : o.bytes !== undefined
            ? { body: o.bytes }
            : o.body !== undefined
              ? { body: JSON.stringify(o.body) }
              : {}),
        ...(signals.length > 0 ? { signal: AbortSignal.any(signals) } : {}),
      });
    } catch (e) {
      if (o.signal?.aborted) throw e;
      throw new BerthError("unavailable", `cannot reach ${this.url}: ${(e as Error).message}`);
    }
  }

  private async json<T>(res: Response): Promise<T> {
    const text = await res.text();
    let json: unknown;
    try {
      json = text ? JSON.parse(text) : {};
    } catch {
      throw new BerthError("internal", `${this.url} answered HTTP ${res.status} with a non-JSON body`);
    }
    if (!res.ok) {
      const err = (json as { error?: { code?: string; message?: string } }).error;
      throw new BerthError(asErrorCode(err?.code), err?.message ?? `HTTP ${res.status}`);
    }
    return json as T;
  }
}

/** A gateway answer's success value, or its `{ok: false, error}` as a BerthError. */
export function gatewayResult<T>(answer: unknown): T {
  const a = answer as { ok?: boolean; error?: { code?: string; message?: string } };
  if (a.ok === false)
    throw new BerthError(asErrorCode(a.error?.code), a.error?.message ?? "the request failed");
  return answer as T;
}
