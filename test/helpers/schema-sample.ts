// A minimal value a JSON schema accepts, so a request built from a route's
// OpenAPI schema gets past validation to its handler. Shared by the route
// fuzzer and the workspace-scoping test, which both walk the OpenAPI document.

export type JsonSchema = Record<string, unknown>;

/** A minimal value the schema accepts (the first alternative, the required properties, the minimum). */
export function sample(s: JsonSchema | undefined): unknown {
  if (!s) return {};
  if ("const" in s) return s.const;
  if (Array.isArray(s.enum)) return s.enum[0];
  for (const k of ["anyOf", "oneOf"] as const) {
    const alts = s[k] as JsonSchema[] | undefined;
    if (alts) return sample(alts.find((x) => x.type !== "null") ?? alts[0]);
  }
  if (Array.isArray(s.allOf)) return Object.assign({}, ...(s.allOf as JsonSchema[]).map((x) => sample(x)));
  const type = Array.isArray(s.type) ? (s.type as string[]).find((t) => t !== "null") : (s.type as string);
  switch (type) {
    case "object": {
      const props = (s.properties ?? {}) as Record<string, JsonSchema>;
      const out: Record<string, unknown> = {};
      for (const k of (s.required ?? []) as string[]) out[k] = sample(props[k]);
      return out;
    }
    case "array":
      return Array.from({ length: Number(s.minItems ?? 0) }, () => sample(s.items as JsonSchema));
    case "string":
      if (s.pattern === "^[0-9a-f]{64}$") return "0".repeat(64);
      return "x".repeat(Math.max(1, Number(s.minLength ?? 1)));
    case "integer":
    case "number":
      return Number(s.minimum ?? 1);
    case "boolean":
      return false;
    default:
      return {};
  }
}
