// The history's filters: event type patterns (checked against EVENT_TYPES)
// and ISO 8601 times. Batches mix types, so types are matched here, per event.

import { invalid } from "../../shared/errors.ts";
import { EVENT_TYPES } from "./types.ts";

/**
 * Checks `type` patterns against EVENT_TYPES (a pattern that can match
 * nothing is refused with the valid names); returns them.
 */
export function parseTypePatterns(type: string | undefined): string[] {
  if (type === undefined || type.trim() === "") return [];
  const patterns = type.split(",").map((p) => p.trim());
  for (const p of patterns) {
    const ok =
      p === "*" ||
      (EVENT_TYPES as readonly string[]).includes(p) ||
      (p.endsWith(".*") && EVENT_TYPES.some((t) => t.startsWith(p.slice(0, -1))));
    if (!ok)
      throw invalid(
        `unknown event type pattern ${JSON.stringify(p)}: use an event type, "prefix.*" or "*"; the types are ${EVENT_TYPES.join(", ")}`,
        { event_types: [...EVENT_TYPES] },
      );
  }
  return patterns;
}

export function parseTime(name: string, v: string | undefined): number | undefined {
  if (v === undefined) return undefined;
  const ms = Date.parse(v);
  if (Number.isNaN(ms)) throw invalid(`${name} ${JSON.stringify(v)} is not an ISO 8601 time`);
  return ms;
}

export const matchesAny = (patterns: string[], type: string) =>
  patterns.length === 0 ||
  patterns.some((p) => p === "*" || p === type || (p.endsWith(".*") && type.startsWith(p.slice(0, -1))));
