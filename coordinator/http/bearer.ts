// The API token of a request, read the same way by the Fastify routes
// (coordinator/http/auth.ts) and the raw paths (endpoints, exposed ports, shell).

import { BerthError } from "../../shared/errors.ts";

/** Reads the token from `Authorization: Bearer T` (a bare `Authorization: T` is accepted too). */
export function bearerToken(header: string | undefined): string {
  if (!header)
    throw new BerthError(
      "unauthenticated",
      "missing Authorization header: send 'Authorization: Bearer <token>'",
    );
  const m = /^(?:Bearer\s+)?(\S+)$/i.exec(header.trim());
  if (!m?.[1] || /^Bearer$/i.test(header.trim())) {
    throw new BerthError("unauthenticated", "malformed Authorization header: expected 'Bearer <token>'");
  }
  return m[1];
}
