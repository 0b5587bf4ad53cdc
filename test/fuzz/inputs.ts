// The fuzzer's inputs: a seeded random source (one seed replays a whole run),
// and the hostile variants of paths, bodies, queries and headers.

/** mulberry32: small, fast and the same on every machine for one seed. */
export class Rng {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0;
  }
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(xs: readonly T[]): T {
    return xs[this.int(xs.length)] as T;
  }
}

/** Path segments that have broken servers: traversal, NULs, bad escapes, unicode, sheer length. */
export const ODD_SEGMENTS: readonly string[] = [
  "..",
  "%2e%2e",
  "..%2F..%2Fetc%2Fpasswd",
  "%2F",
  "%00",
  "a%00b",
  "%",
  "%zz",
  "%C0%AE",
  "%FF%FE",
  "%E2%80%AE",
  encodeURIComponent("ünïcødé-名前-🚀"),
  encodeURIComponent("\u202e\u200b\ufeff"),
  encodeURIComponent("<script>alert(1)</script>"),
  encodeURIComponent("' OR 1=1 --"),
  encodeURIComponent("${jndi:ldap://x}"),
  encodeURIComponent("{{7*7}}"),
  "x".repeat(5000),
  "9".repeat(40),
  "-1",
  "0",
  "1e309",
  "NaN",
  "null",
  "undefined",
  "__proto__",
  "constructor",
  "%20",
  "~",
  ";",
  "a;b=c",
  "a?b",
  "a#b",
];

/** Query strings with wrong types, repeats, huge values and odd encodings. */
export function oddQuery(rng: Rng, names: readonly string[]): string {
  const keys = [
    ...names,
    "limit",
    "cursor",
    "since",
    "after",
    "offset",
    "follow",
    "status",
    "x",
    "__proto__",
  ];
  const vals = [
    "-1",
    "0",
    "1e309",
    "abc",
    "true",
    "%00",
    "x".repeat(3000),
    "[]",
    "{}",
    "%zz",
    "",
    "9".repeat(30),
  ];
  const parts: string[] = [];
  for (let i = 0, n = 1 + rng.int(4); i < n; i++) parts.push(`${rng.pick(keys)}=${rng.pick(vals)}`);
  return parts.join("&");
}

/** A body of the wrong JSON type, malformed JSON text, or the sample changed in one place. */
export function oddBody(rng: Rng, valid: unknown): { payload: string | Buffer; contentType: string } {
  const json = (v: unknown) => ({ payload: JSON.stringify(v), contentType: "application/json" });
  const obj =
    valid && typeof valid === "object" && !Array.isArray(valid) ? (valid as Record<string, unknown>) : {};
  const keys = Object.keys(obj);
  const wrongValues: unknown[] = [
    null,
    1,
    -1,
    1.5,
    "x",
    "",
    true,
    [],
    {},
    [1, "a"],
    { a: { b: { c: [] } } },
    2 ** 63,
    "x".repeat(100_000),
  ];
  switch (rng.int(14)) {
    case 0:
      return {
        payload: rng.pick([
          '{"a":',
          "{",
          "[1,2",
          '{"a":1}}',
          "nul",
          "\u0000",
          '{"a":"\\x"}',
          "{'a':1}",
          "1 2",
        ]),
        contentType: "application/json",
      };
    case 1:
      return json(rng.pick([[], "string", 42, null, true, [obj]]));
    case 2: {
      // Each required field missing in turn.
      if (keys.length === 0) return json({ unexpected: 1 });
      const copy = { ...obj };
      delete copy[rng.pick(keys)];
      return json(copy);
    }
    case 3: {
      if (keys.length === 0)
        return json({ [rng.pick(["name", "id", "image", "args"])]: rng.pick(wrongValues) });
      return json({ ...obj, [rng.pick(keys)]: rng.pick(wrongValues) });
    }
    case 4:
      return json({
        ...obj,
        extra_field: "x",
        ["__proto__"]: { polluted: true },
        constructor: { prototype: {} },
      });
    case 5: {
      // Deep nesting: parsers and validators that recurse.
      let v: unknown = 1;
      for (let i = 0; i < 2000; i++) v = [v];
      return json(keys.length > 0 ? { ...obj, [rng.pick(keys)]: v } : v);
    }
    case 6:
      return { payload: "", contentType: "application/json" };
    case 7:
      return { payload: randomBytes(rng, 64), contentType: "application/octet-stream" };
    case 8:
      return { payload: "a=1&b=2", contentType: "application/x-www-form-urlencoded" };
    case 9:
      return {
        payload: JSON.stringify(obj),
        contentType: rng.pick([
          "text/plain",
          "application/xml",
          "multipart/form-data; boundary=x",
          "application/json; charset=latin1",
          "*/*",
          ";;;",
        ]),
      };
    case 10:
      return json(Object.fromEntries(keys.map((k) => [k, "x".repeat(200_000)])));
    case 11:
      return json(Object.fromEntries(Array.from({ length: 2000 }, (_, i) => [`k${i}`, i])));
    case 12:
      return { payload: Buffer.from([0xff, 0xfe, 0x7b, 0x00, 0x22]), contentType: "application/json" };
    default:
      return json({ ...obj, ...Object.fromEntries(keys.map((k) => [k, rng.pick(wrongValues)])) });
  }
}

function randomBytes(rng: Rng, n: number): Buffer {
  return Buffer.from(Array.from({ length: n }, () => rng.int(256)));
}

/** Authorization headers that must all be 401: missing, malformed, unknown, enormous. */
export function oddAuthorization(rng: Rng, own: string): string | undefined {
  return rng.pick([
    undefined,
    "",
    "Bearer",
    "Bearer ",
    "Basic dXNlcjpwYXNz",
    `Bearer ${own}x`,
    `Bearer ${own.slice(0, -1)}`,
    `Bearer ${"A".repeat(8000)}`,
    "Bearer a b c",
    "Bearer \u00e9\u00e8",
    "Bearer ../../etc/passwd",
    `bearer  ${own.toUpperCase()}`,
  ]);
}
