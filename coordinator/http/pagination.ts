// Cursor pagination of the REST API's lists (docs/api.md "Pagination"):
// `limit` (default 50, at most 500) and `cursor` in, `next_cursor` out (null
// on the last page). A cursor is opaque to clients: base64url of the JSON
// keyset position (the sort key of the last item of the page), tagged with
// the list it belongs to so one list's cursor is refused by another.

import { type TObject, type TProperties, Type } from "@sinclair/typebox";
import { BerthError } from "../../shared/errors.ts";

export const DEFAULT_PAGE_LIMIT = 50;
export const MAX_PAGE_LIMIT = 500;

/** The position after which the next page starts: the sort key of the last item sent. */
export type CursorKey = (string | number)[];

export interface PageRequest {
  limit: number;
  /** undefined: the first page. */
  after: CursorKey | undefined;
}

export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/** The query properties every paginated list takes. */
export const PageQueryProperties = {
  limit: Type.Optional(
    Type.Integer({
      minimum: 1,
      maximum: MAX_PAGE_LIMIT,
      default: DEFAULT_PAGE_LIMIT,
      description: `items per page (default ${DEFAULT_PAGE_LIMIT}, at most ${MAX_PAGE_LIMIT})`,
    }),
  ),
  cursor: Type.Optional(
    Type.String({ minLength: 1, maxLength: 2000, description: "next_cursor of the previous page" }),
  ),
};

/** A list's query schema: its filters plus limit and cursor. */
export function pageQuery<P extends TProperties>(filters: P): TObject<P & typeof PageQueryProperties> {
  return Type.Object({ ...filters, ...PageQueryProperties }, { additionalProperties: false });
}

export const NextCursor = Type.Union([Type.String(), Type.Null()], {
  description: "pass as `cursor` for the next page; null on the last page",
});

export function encodeCursor(list: string, key: CursorKey): string {
  return Buffer.from(JSON.stringify({ l: list, k: key }), "utf8").toString("base64url");
}

/** The key a cursor holds; invalid_request naming the cause for anything else. */
export function decodeCursor(list: string, cursor: string, arity: number): CursorKey {
  const bad = (why: string) =>
    new BerthError(
      "invalid_request",
      `invalid cursor: ${why}; pass next_cursor from the previous page unchanged`,
    );
  if (!/^[A-Za-z0-9_-]+$/.test(cursor)) throw bad("not base64url");
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(cursor, "base64url").toString("utf8"));
  } catch {
    throw bad("not a cursor of this API");
  }
  const p = parsed as { l?: unknown; k?: unknown };
  if (typeof p !== "object" || p === null || !Array.isArray(p.k)) throw bad("not a cursor of this API");
  if (p.l !== list) throw bad(`it belongs to another list (${String(p.l)}), not ${list}`);
  const key = p.k as unknown[];
  if (key.length !== arity || !key.every((v) => typeof v === "string" || typeof v === "number")) {
    throw bad("its position is malformed");
  }
  return key as CursorKey;
}

/** The limit and position a list's query asks for. */
export function pageRequest(
  list: string,
  q: { limit?: number; cursor?: string },
  arity: number,
): PageRequest {
  const limit = q.limit ?? DEFAULT_PAGE_LIMIT;
  // The schema's bounds, again: a query's "1e309" is coerced to Infinity, which Ajv lets through.
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_PAGE_LIMIT)
    throw new BerthError("invalid_request", `limit must be a whole number from 1 to ${MAX_PAGE_LIMIT}`, {
      field: "limit",
    });
  return {
    limit,
    after: q.cursor === undefined ? undefined : decodeCursor(list, q.cursor, arity),
  };
}

/**
 * A page from `limit + 1` rows fetched in order: the extra row only says
 * that more follow; next_cursor is the key of the last row sent.
 */
export function pageOf<T>(list: string, rows: T[], limit: number, keyOf: (t: T) => CursorKey): Page<T> {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return {
    items,
    next_cursor: rows.length > limit && last !== undefined ? encodeCursor(list, keyOf(last)) : null,
  };
}

const compareKeys = (a: CursorKey, b: CursorKey): number => {
  for (let i = 0; i < a.length; i++) {
    const x = a[i] as string | number;
    const y = b[i] as string | number;
    if (x < y) return -1;
    if (x > y) return 1;
  }
  return 0;
};

/**
 * Pages an in-memory list by keyset: sorted by `keyOf` (descending when
 * `order` is "desc"), the page starts after the cursor's key. Keys must be
 * unique (end them with the item's id) so no item is skipped or repeated.
 */
export function paginate<T>(
  list: string,
  items: T[],
  keyOf: (t: T) => CursorKey,
  page: PageRequest,
  order: "asc" | "desc" = "asc",
): Page<T> {
  const sign = order === "asc" ? 1 : -1;
  const keyed = items.map((item) => ({ item, key: keyOf(item) }));
  keyed.sort((a, b) => sign * compareKeys(a.key, b.key));
  const after = page.after;
  const rest = after ? keyed.filter((k) => sign * compareKeys(k.key, after) > 0) : keyed;
  return pageOf(
    list,
    rest.slice(0, page.limit + 1).map((k) => k.item),
    page.limit,
    keyOf,
  );
}
