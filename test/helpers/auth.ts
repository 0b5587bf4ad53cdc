// The Authorization header of an API token.

/** `{ authorization: "Bearer <token>" }`, to spread into a request's headers. */
export function bearer(token: string): { authorization: string } {
  return { authorization: `Bearer ${token}` };
}
