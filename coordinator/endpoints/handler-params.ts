// The coordinator's copy of the binding rule of sdk/python/berth/handler_call.py
// (bind_endpoint_call): a JSON body that would not bind to the handler is
// refused before a container is bothered. Both sides must agree; the Python
// tests and test/deployments/handler-params.test.ts check the same cases.

import type { HandlerParams } from "../../shared/tasks.ts";

const CALLBACK_URL = "callback_url";
const CONTEXT = "context";

/** The body's keys that name no parameter, and the required parameters it lacks (both empty: it binds). */
export function checkBody(
  params: HandlerParams,
  body: Record<string, unknown>,
): { unknown: string[]; missing: string[] } {
  let keys = Object.keys(body);
  // A callback_url the handler cannot take is the request's callback only.
  if (keys.includes(CALLBACK_URL) && !params.names.includes(CALLBACK_URL) && !params.var_keyword)
    keys = keys.filter((k) => k !== CALLBACK_URL);
  // One parameter, no **kwargs: the whole body is that argument unless a key names it.
  const wholeBody =
    params.names.length === 1 &&
    !params.var_keyword &&
    keys.length > 0 &&
    !keys.includes(params.names[0] as string);
  if (wholeBody) return { unknown: [], missing: [] };
  const unknown = params.var_keyword
    ? params.context && keys.includes(CONTEXT)
      ? [CONTEXT]
      : []
    : keys.filter((k) => !params.names.includes(k));
  const missing = params.required.filter((n) => !keys.includes(n));
  return { unknown, missing };
}

/** One line naming what is wrong, for a 400 answer. */
export function describeBodyMismatch(r: { unknown: string[]; missing: string[] }): string {
  const parts: string[] = [];
  const quoted = (xs: string[]) => xs.map((x) => `'${x}'`).join(", ");
  if (r.unknown.length)
    parts.push(`does not accept the key${r.unknown.length > 1 ? "s" : ""} ${quoted(r.unknown)}`);
  if (r.missing.length) parts.push(`needs the key${r.missing.length > 1 ? "s" : ""} ${quoted(r.missing)}`);
  return `the handler ${parts.join(" and ")}`;
}
