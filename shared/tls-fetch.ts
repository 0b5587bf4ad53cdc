// A fetch that trusts one more certificate authority besides the system's:
// the cluster CA of a `berth up --advertise` cluster, whose coordinator,
// NATS and registry serve certificates it issued (docs/install.md, "Joining
// more hosts"). Node 20's own fetch takes no CA of its own, so requests go
// through node:https with the CA added to the default roots; the answer is a
// standard Response (streamed body), so callers use it as they use fetch.

import { X509Certificate } from "node:crypto";
import { type IncomingMessage, request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { Readable } from "node:stream";
import { rootCertificates } from "node:tls";
import { BerthError } from "./errors.ts";

const MAX_REDIRECTS = 5;
/** Statuses whose Response must have no body. */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/** `fetch` trusting `caPem` as well as the system's roots; globalThis.fetch when there is none. */
export function fetchTrusting(caPem: string | undefined): typeof fetch {
  if (!caPem) return globalThis.fetch;
  const ca = [...rootCertificates, caPem];
  const send = (url: URL, init: RequestInit, hops: number): Promise<Response> =>
    new Promise<Response>((resolve, reject) => {
      const headers = new Headers(init.headers);
      const body = init.body ?? undefined;
      if (typeof body === "string" || body instanceof Uint8Array)
        headers.set("content-length", String(Buffer.byteLength(body)));
      const options = {
        method: init.method ?? "GET",
        headers: Object.fromEntries(headers),
        ...(init.signal ? { signal: init.signal } : {}),
      };
      const onAnswer = (res: IncomingMessage) => {
        const status = res.statusCode ?? 0;
        const location = res.headers.location;
        const method = options.method.toUpperCase();
        if (status >= 300 && status < 400 && location && (method === "GET" || method === "HEAD")) {
          res.resume();
          if (hops >= MAX_REDIRECTS) {
            reject(new TypeError(`fetch failed: more than ${MAX_REDIRECTS} redirects from ${url}`));
            return;
          }
          send(new URL(location, url), init, hops + 1).then(resolve, reject);
          return;
        }
        const answerHeaders = new Headers();
        for (const [k, v] of Object.entries(res.headers)) {
          if (v === undefined) continue;
          for (const one of Array.isArray(v) ? v : [v]) answerHeaders.append(k, one);
        }
        const noBody = NULL_BODY.has(status) || method === "HEAD";
        if (noBody) res.resume();
        resolve(
          new Response(noBody ? null : (Readable.toWeb(res) as ReadableStream<Uint8Array>), {
            status,
            statusText: res.statusMessage ?? "",
            headers: answerHeaders,
          }),
        );
      };
      const req =
        url.protocol === "https:"
          ? httpsRequest(url, { ...options, ca }, onAnswer)
          : httpRequest(url, options, onAnswer);
      // fetch's own shape: a network failure is a TypeError whose cause says why.
      req.once("error", (e) => reject(Object.assign(new TypeError("fetch failed"), { cause: e })));
      if (body === undefined) req.end();
      else if (typeof body === "string" || body instanceof Uint8Array) req.end(body);
      else if (body instanceof ReadableStream)
        Readable.fromWeb(body as import("node:stream/web").ReadableStream).pipe(req);
      else if (body instanceof ArrayBuffer) req.end(Buffer.from(body));
      else {
        req.destroy();
        reject(new TypeError(`fetch over the cluster CA cannot send a ${body.constructor.name} body`));
      }
    });
  return ((input: string | URL | Request, init: RequestInit = {}) => {
    if (input instanceof Request)
      throw new TypeError("fetch over the cluster CA takes a URL and an init, not a Request");
    return send(new URL(String(input)), init, 0);
  }) as typeof fetch;
}

/** The SHA-256 fingerprint of a PEM certificate, as `sha256:` and 64 lowercase hex digits. */
export function caFingerprint(pem: string): string {
  return `sha256:${new X509Certificate(pem).fingerprint256.replaceAll(":", "").toLowerCase()}`;
}

/** `sha256:HEX`, bare HEX or HEX with colons (as openssl prints it) as `sha256:` and lowercase hex. */
export function parseCaFingerprint(v: string): string {
  const hex = v
    .trim()
    .replace(/^sha256:/i, "")
    .replaceAll(":", "")
    .toLowerCase();
  if (!/^[0-9a-f]{64}$/.test(hex))
    throw new BerthError(
      "invalid_request",
      `CA fingerprint ${JSON.stringify(v)} must be sha256: and 64 hex digits (berth up prints it)`,
    );
  return `sha256:${hex}`;
}
