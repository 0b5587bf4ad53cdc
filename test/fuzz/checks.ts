// What every fuzz answer must be: no server error, no trace of the server's
// insides, the catalog's error shape, nothing of the other workspace.

import { isErrorCode } from "../../shared/errors.ts";
import type { FuzzAnswer } from "./send.ts";

/** What the server's insides look like in text: stack frames, source paths, driver and runtime errors. */
const INSIDES: readonly [string, RegExp][] = [
  ["a stack frame", /\n\s+at [^\n]+[(\s][^\n]*:\d+:\d+/],
  ["a source path", /\/work\/|node_modules|\.ts:\d+|file:\/\//],
  ["a temp path", /\/tmp\/berth-/],
  [
    "a runtime error",
    /\b(TypeError|ReferenceError|RangeError|SyntaxError: Unexpected|SqliteError|Cannot read properties)\b/,
  ],
];

/** Values the request carried (ids, names), which may come back in a message: replaced before looking for markers. */
export function sentValues(url: string, payload: unknown, minLength = 4): string[] {
  let decoded = url;
  try {
    decoded = decodeURIComponent(url);
  } catch {
    // A deliberately bad escape: the raw URL is what was sent.
  }
  const fromUrl = decoded.split(/[/?&=]/);
  const fromBody = typeof payload === "string" ? payload.split(/["{}[\],:\s]/) : [];
  return [...fromUrl, ...fromBody].filter((p) => p.length >= minLength);
}

export function normalize(body: string, sent: readonly string[]): string {
  return [...sent].sort((a, b) => b.length - a.length).reduce((t, v) => t.split(v).join("<sent>"), body);
}

/** The problems of one answer (empty when it is fine); `foreignMarker` must not appear once sent values are removed. */
export function problemsOf(
  a: FuzzAnswer,
  o: { foreignMarker?: string; sent: readonly string[]; method: string },
): string[] {
  const out: string[] = [];
  // 501 is the catalog's not_implemented, answered by design on the spec routes berth does not serve yet.
  const notImplemented = a.status === 501 && /"not_implemented"/.test(a.body);
  if (a.status >= 500 && !notImplemented) out.push(`status ${a.status}`);
  for (const [what, re] of INSIDES) if (re.test(a.body)) out.push(`the body holds ${what}`);
  // HEAD answers carry no body to check.
  if (a.status >= 400 && /json/.test(a.contentType) && o.method !== "HEAD") {
    let parsed: { error?: { code?: unknown; message?: unknown }; ok?: unknown } | undefined;
    try {
      parsed = JSON.parse(a.body);
    } catch {
      out.push("an error body that is not JSON");
    }
    const code = parsed?.error?.code;
    if (
      parsed &&
      (typeof code !== "string" || !isErrorCode(code) || typeof parsed.error?.message !== "string")
    ) {
      out.push("an error body without a catalog code and message");
    }
  }
  if (o.foreignMarker && normalize(a.body, o.sent).includes(o.foreignMarker)) {
    out.push(`the body holds the other workspace's "${o.foreignMarker}"`);
  }
  return out;
}
