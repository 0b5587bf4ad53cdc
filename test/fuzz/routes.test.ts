// The route fuzzer (hostile input): every operation of the app's
// own OpenAPI document — so a route added later is fuzzed as soon as it is
// wired — plus the catch-all routes the document hides, driven with
// malformed, oversized, wrongly typed and cross-workspace requests from a
// seeded random source. Every answer: no 5xx, no stack trace or internal
// path, the catalog's error shape, nothing of the other workspace; another
// workspace's object is 404 (403 on operator-only routes; the SDK gateway's
// ok:false); the heap stays bounded. BERTH_FUZZ_SEED replays a run,
// BERTH_FUZZ_REQUESTS changes its length (default 10,000).

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { bearer } from "../helpers/auth.ts";
import { normalize, problemsOf, sentValues } from "./checks.ts";
import { type FuzzFixture, type SideValues, startFuzzFixture } from "./fixture.ts";
import { type JsonSchema, sample } from "../helpers/schema-sample.ts";
import { ODD_SEGMENTS, oddAuthorization, oddBody, oddQuery, Rng } from "./inputs.ts";
import { type FuzzAnswer, type FuzzRequest, send } from "./send.ts";

const SEED = Number(process.env.BERTH_FUZZ_SEED ?? 0x18f022);
const REQUESTS = Number(process.env.BERTH_FUZZ_REQUESTS ?? 10_000);
/** Heap growth over the whole run, after a full GC: generous, it catches per-request leaks (10,000 × a few KiB). */
const HEAP_GROWTH_LIMIT = 192 * 1024 * 1024;

interface Operation {
  method: string;
  path: string;
  parameters?: { in: string; name: string; required?: boolean; schema?: JsonSchema }[];
  requestBody?: { content?: Record<string, { schema?: JsonSchema }> };
  "x-body-limit"?: number;
  /** Serves no workspace's objects (the dashboard's files): the same answer to every token, so the cross-workspace checks skip it. */
  public?: boolean;
}

/**
 * Routes the document hides (catch-alls and the Prometheus scrape): fuzzed too.
 * `{*}` stands for the rest of the path.
 */
const HIDDEN_ROUTES: Operation[] = [
  { method: "GET", path: "/api/v1/volume/{ws}/{name}/files/{*}" },
  { method: "PUT", path: "/api/v1/volume/{ws}/{name}/files/{*}" },
  { method: "GET", path: "/endpoint/{deploymentName}" },
  { method: "POST", path: "/endpoint/{deploymentName}" },
  { method: "POST", path: "/endpoint/id/{id}" },
  { method: "GET", path: "/metrics" },
  // The OpenAI-compatible gateway (docs/inference.md): served before Fastify in the coordinator, through these routes by inject.
  { method: "GET", path: "/v1/models" },
  { method: "GET", path: "/v1/models/{*}" },
  { method: "POST", path: "/v1/models/{*}" },
  { method: "POST", path: "/v1/chat/completions" },
  { method: "POST", path: "/v1/completions" },
  { method: "POST", path: "/v1/embeddings" },
  // The web dashboard's page and built assets (docs/dashboard.md).
  { method: "GET", path: "/", public: true },
  { method: "GET", path: "/assets/{file}", public: true },
];

/** Requests in flight at once: the app serves clients concurrently, and the run is shorter. */
const CONCURRENCY = 4;
/** How long a request may go unanswered before it is reported as hung. */
const NO_ANSWER_MS = 60_000;

const gc = (): void => {
  setFlagsFromString("--expose-gc");
  (runInNewContext("gc") as () => void)();
};

/** Bodies past a limit above this are not sent (a 256 MiB object upload per request would be the whole run). */
const OVERSIZE_CAP = 64 * 1024 * 1024;
const oversized = new Map<number, string>();
/** A JSON object `bytes` long (one per size, built once). */
const oversizedJson = (bytes: number): string => {
  let s = oversized.get(bytes);
  if (!s) {
    s = `{"a":"${"x".repeat(bytes - 8)}"}`;
    oversized.set(bytes, s);
  }
  return s;
};

type Side = "a" | "b";

/** An id of the same form that names nothing. */
const unknownId = (v: string): string =>
  /^[0-9a-f]{64}$/.test(v)
    ? "0".repeat(64)
    : /-/.test(v)
      ? v.replace(/(?<=-)[^-]+$/, (rest) => "0".repeat(rest.length))
      : `${v}0`;
const other = (s: Side): Side => (s === "a" ? "b" : "a");

describe("route fuzzer: hostile input on every route", () => {
  let fz: FuzzFixture;
  let ops: Operation[];
  const cleanups: (() => unknown)[] = [];
  const problems: string[] = [];
  const statuses = new Map<number, number>();
  /** Operations both workspace tokens were refused with 403 permission_denied (the cross-workspace test finds them). */
  const operatorOnly = new Set<string>();
  let sent = 0;
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  before(async () => {
    fz = await startFuzzFixture({ after: (fn) => cleanups.push(fn) });
    const app = fz.f.x.app;
    // Objects B makes through the API, as a client would.
    const b = fz.values.b;
    const ok = async (method: string, url: string, payload: object) => {
      const r = await app.inject({ method: method as "POST", url, headers: bearer(fz.tokens.b), payload });
      assert.ok(r.statusCode < 300, `${method} ${url}: ${r.statusCode} ${r.body}`);
      return r.json();
    };
    await ok("POST", `/api/v1/secret/${b.ws}`, { name: "BRAVO_SECRET", value: "bravo-value" });
    const hook = await ok("POST", `/api/v1/webhook/${b.ws}`, { url: "https://hooks.example.org/bravo" });
    b.webhookId = hook.id ?? hook.webhook?.id;
    await ok("POST", `/api/v1/signal/${b.ws}/BRAVO_SECRET/set`, { ttl: 600 });
    const r = await app.inject({ method: "GET", url: "/api/v1/openapi.json" });
    const doc = r.json() as { paths: Record<string, Record<string, Omit<Operation, "method" | "path">>> };
    ops = Object.entries(doc.paths).flatMap(([path, item]) =>
      Object.entries(item)
        .filter(([m]) => ["get", "post", "put", "patch", "delete"].includes(m))
        .map(([m, op]) => ({ ...op, method: m.toUpperCase(), path })),
    );
    ops.push(...HIDDEN_ROUTES);
  });

  /** The value of path parameter `name` of `path` naming `side`'s object (or a plain word when none is known). */
  const paramValue = (path: string, name: string, v: SideValues): string => {
    if (name === "*") return "canary.txt";
    if (path.startsWith("/taskqueue/")) {
      if (name === "name") return v.deploymentName as string;
      if (name === "version") return v.version as string;
    }
    if (path.startsWith("/endpoint/")) return name === "id" ? (v.id as string) : (v.deploymentName as string);
    if (path.startsWith("/api/v1/gateway/sandboxes/") && name === "id") return v.sandboxId as string;
    if (path.startsWith("/api/v1/volume/") && name === "name") return v.volume as string;
    if (path.startsWith("/api/v1/bot/") && name === "name") return v.botName as string;
    return v[name] ?? "fuzz";
  };
  const fill = (op: Operation, v: SideValues, odd?: { name: string; value: string }) => {
    const path = op.path.replace(/\{([^}]+)\}/g, (_m, name: string) =>
      odd?.name === name ? odd.value : encodeURIComponent(paramValue(op.path, name, v)).replace(/%2F/g, "/"),
    );
    // The file name of a volume's own marker is the side's, not A's.
    return path.replace("canary.txt", `${v.volume?.replace("-vol", "")}.txt`);
  };
  const requiredQuery = (op: Operation, v: SideValues) => {
    const q = new URLSearchParams();
    for (const p of op.parameters ?? [])
      if (p.in === "query" && p.required) q.set(p.name, v[p.name] ?? String(sample(p.schema)));
    return q.toString();
  };
  const bodySchema = (op: Operation) => op.requestBody?.content?.["application/json"]?.schema;
  /**
   * The long polls (a process's wait) answer when their subject ends or their
   * timeout passes: every JSON object body the fuzzer sends them says timeout 0,
   * so they answer at once instead of holding the run.
   */
  const timeoutFields = (op: Operation) =>
    Object.keys((bodySchema(op)?.properties ?? {}) as object).filter((k) => /timeout/.test(k));
  const answerAtOnce = (op: Operation, payload: string | Buffer): string | Buffer => {
    const fields = timeoutFields(op);
    if (fields.length === 0 || typeof payload !== "string") return payload;
    try {
      const v = JSON.parse(payload) as unknown;
      if (!v || typeof v !== "object" || Array.isArray(v)) return payload;
      return JSON.stringify({ ...(v as object), ...Object.fromEntries(fields.map((f) => [f, 0])) });
    } catch {
      return payload;
    }
  };
  const takesBody = (op: Operation) =>
    op.requestBody !== undefined || ["POST", "PUT", "PATCH"].includes(op.method);

  /** Sends, checks and records one request; returns the answer. */
  const fire = async (req: FuzzRequest, side: Side | undefined, what: string): Promise<FuzzAnswer> => {
    sent++;
    let a: FuzzAnswer;
    let timer: NodeJS.Timeout | undefined;
    try {
      // A safety net, not a timing assertion: a request the server never answers is a finding, not a stuck suite.
      const hung = new Promise<never>((_r, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer in ${NO_ANSWER_MS} ms`)), NO_ANSWER_MS);
      });
      a = await Promise.race([send(fz.f.x.app, req), hung]);
    } catch (e) {
      problems.push(`${what}: inject failed: ${(e as Error).message}`);
      return { status: 0, contentType: "", body: "", streamed: false };
    } finally {
      clearTimeout(timer);
    }
    statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
    const foreign = side ? fz.markers[other(side)] : undefined;
    const found = problemsOf(a, {
      ...(foreign ? { foreignMarker: foreign } : {}),
      sent: sentValues(req.url, req.payload),
      method: req.method,
    });
    for (const p of found)
      problems.push(
        `${what}: ${p} — ${req.method} ${req.url.slice(0, 200)} → ${a.status} ${a.body.slice(0, 300)}`,
      );
    return a;
  };

  test("another workspace's objects: 404 on every route that names them (403 operator-only; gateway ok:false)", async () => {
    let checked = 0;
    const refusedA = new Set<string>();
    for (const op of ops.filter((o) => /\{(?!\*)/.test(o.path) && !o.public)) {
      for (const side of ["a", "b"] as const) {
        const theirs = fz.values[other(side)];
        const url = fill(op, theirs);
        const q = requiredQuery(op, theirs);
        const body = takesBody(op)
          ? (answerAtOnce(op, JSON.stringify(sample(bodySchema(op)))) as string)
          : undefined;
        const a = await fire(
          {
            method: op.method,
            url: q ? `${url}?${q}` : url,
            headers: {
              ...bearer(fz.tokens[side]),
              ...(body !== undefined ? { "content-type": "application/json" } : {}),
            },
            ...(body !== undefined ? { payload: body } : {}),
          },
          side,
          `cross ${op.method} ${op.path}`,
        );
        const what = `${side}'s token on ${other(side)}'s ${op.method} ${op.path} → ${a.status} ${a.body.slice(0, 200)}`;
        if (a.status === 403 && /permission_denied/.test(a.body))
          (side === "a" ? refusedA : operatorOnly).add(`${op.method} ${op.path}`);
        // The answer must be the one an id that names nothing gets (the ids themselves aside).
        const bogus = Object.fromEntries(
          Object.entries(theirs).map(([k, v]) => [k, k === "ws" ? v : unknownId(v)]),
        );
        const bogusUrl = fill(op, bogus);
        const bq = requiredQuery(op, bogus);
        const b = await send(fz.f.x.app, {
          method: op.method,
          url: bq ? `${bogusUrl}?${bq}` : bogusUrl,
          headers: {
            ...bearer(fz.tokens[side]),
            ...(body !== undefined ? { "content-type": "application/json" } : {}),
          },
          ...(body !== undefined ? { payload: body } : {}),
        });
        const norm = (x: FuzzAnswer, u: string) =>
          normalize(x.body, sentValues(u, body, 2)).replace(/"(created|updated)_at":"[^"]*"/g, "");
        if (a.status !== b.status || norm(a, url) !== norm(b, bogusUrl)) {
          problems.push(`leak (differs from an unknown id's ${b.status} ${b.body.slice(0, 200)}): ${what}`);
        }
        if (op.path.startsWith("/api/v1/gateway/")) {
          if (a.streamed) problems.push(`leak (a stream opened): ${what}`);
        } else if (op.path.startsWith("/endpoint/")) {
          // The endpoint path names deployments by the caller's workspace: B's names are not there.
          if (a.status !== 404) problems.push(`leak: ${what}`);
        } else if (a.status !== 404 && !(a.status === 403 && /permission_denied/.test(a.body))) {
          problems.push(`leak: ${what}`);
        }
        checked++;
      }
    }
    for (const key of operatorOnly) if (!refusedA.has(key)) operatorOnly.delete(key);
    assert.ok(checked >= 100, `only ${checked} cross-workspace requests`);
    assert.deepEqual(problems, []);
  });

  test(`${REQUESTS} hostile requests across every route: no 5xx, no insides, no leak, bounded heap`, async (t) => {
    const rng = new Rng(SEED);
    t.diagnostic(
      `seed ${SEED} (BERTH_FUZZ_SEED=${SEED} replays this run), ${REQUESTS} requests over ${ops.length} operations`,
    );
    gc();
    const heapBefore = process.memoryUsage().heapUsed;
    const started = Date.now();
    const covered = new Set<string>();
    const msBy = new Map<string, number>();
    const oversizedRefused = new Set<string>();
    const classes = ["valid", "body", "path", "query", "method", "auth", "cross", "oversized"] as const;
    const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"];
    const pathsMethods = new Map<string, Set<string>>();
    for (const op of ops) pathsMethods.set(op.path, (pathsMethods.get(op.path) ?? new Set()).add(op.method));
    // Every request is drawn first (so one seed is one list of requests), then sent CONCURRENCY at a time.
    const oversizedOps = new Set<string>();
    /** side: whose token (none: the admin's, which may name either workspace's objects). */
    const planned: {
      op: Operation;
      kind: string;
      side: Side | undefined;
      method: string;
      req: FuzzRequest;
    }[] = [];
    for (let i = 0; i < REQUESTS; i++) {
      const op = ops[i % ops.length] as Operation;
      const kind = rng.pick(classes);
      const side: Side = rng.next() < 0.5 ? "a" : "b";
      const own = fz.values[side];
      const paramNames = [...op.path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1] as string);
      let values = own;
      let method = op.method;
      let odd: { name: string; value: string } | undefined;
      let query = requiredQuery(op, own);
      let auth: string | undefined = `Bearer ${fz.tokens[side]}`;
      let body: { payload: string | Buffer; contentType: string } | undefined = takesBody(op)
        ? { payload: JSON.stringify(sample(bodySchema(op))), contentType: "application/json" }
        : undefined;
      switch (kind) {
        case "body":
          body = oddBody(rng, sample(bodySchema(op)));
          break;
        case "path":
          if (paramNames.length > 0) odd = { name: rng.pick(paramNames), value: rng.pick(ODD_SEGMENTS) };
          else query = oddQuery(rng, []);
          break;
        case "query":
          query = oddQuery(
            rng,
            (op.parameters ?? []).filter((p) => p.in === "query").map((p) => p.name),
          );
          break;
        case "method": {
          const defined = pathsMethods.get(op.path) ?? new Set();
          method = rng.pick(METHODS.filter((m) => !defined.has(m) && !(m === "HEAD" && defined.has("GET"))));
          break;
        }
        case "auth":
          auth = oddAuthorization(rng, fz.tokens[side]);
          break;
        case "cross":
          values = fz.values[other(side)];
          if (body && rng.next() < 0.5) body = oddBody(rng, sample(bodySchema(op)));
          break;
        case "oversized": {
          // One byte past the route's documented limit (x-body-limit); limits past 64 MiB (objects,
          // volume files) are their routes' own tests' to reach: here they get an ordinary body.
          // Once per operation: tens of MiB per request would make the run minutes long.
          const limit = op["x-body-limit"];
          const key = `${op.method} ${op.path}`;
          if (limit !== undefined && limit <= OVERSIZE_CAP && !oversizedOps.has(key) && oversizedOps.add(key))
            body = { payload: oversizedJson(limit + 1), contentType: "application/json" };
          break;
        }
        default:
          break;
      }
      // Every other round, a request to an operator-only route carries the admin token (A's objects, an agent of
      // its own), so the handlers behind the 403 are fuzzed too; the request is drawn all the same.
      const asAdmin =
        operatorOnly.has(`${op.method} ${op.path}`) &&
        !["auth", "cross", "oversized"].includes(kind) &&
        Math.floor(i / ops.length) % 2 === 0;
      if (asAdmin) {
        values = fz.adminValues;
        auth = `Bearer ${fz.tokens.admin}`;
      }
      const url = fill(op, values, odd);
      const full = query ? `${url}?${query}` : url;
      const req: FuzzRequest = {
        method,
        url: full,
        headers: {
          ...(auth !== undefined ? { authorization: auth } : {}),
          ...(body ? { "content-type": body.contentType } : {}),
        },
        ...(body ? { payload: answerAtOnce(op, body.payload) } : {}),
      };
      planned.push({
        op,
        kind: asAdmin ? `admin ${kind}` : kind,
        side: asAdmin ? undefined : side,
        method,
        req,
      });
    }
    let next = 0;
    const worker = async () => {
      for (let p = planned[next++]; p; p = planned[next++]) await run(p);
    };
    const run = async ({ op, kind, side, method, req }: (typeof planned)[number]) => {
      const t0 = performance.now();
      const full = req.url;
      const a = await fire(req, side, `${kind} ${op.method} ${op.path}`);
      if (
        kind === "oversized" &&
        typeof req.payload === "string" &&
        req.payload.length > (op["x-body-limit"] ?? Number.POSITIVE_INFINITY)
      ) {
        const refused = op.path.startsWith("/api/v1/gateway/")
          ? /"code":"resource_exhausted"/.test(a.body)
          : a.status === 413 && /"code":"resource_exhausted"/.test(a.body);
        // Refused earlier for another reason (a route that reads its body itself, a 401) is fine; accepted is not.
        if (!refused && a.status < 300)
          problems.push(
            `over the limit but accepted: ${op.method} ${op.path} → ${a.status} ${a.body.slice(0, 200)}`,
          );
        if (refused) oversizedRefused.add(`${op.method} ${op.path}`);
      }
      if (
        side &&
        kind === "cross" &&
        a.status >= 200 &&
        a.status < 300 &&
        op.path.includes("{") &&
        !op.public &&
        !op.path.startsWith("/api/v1/gateway/")
      ) {
        problems.push(
          `leak: ${side}'s token on ${other(side)}'s ${method} ${full.slice(0, 200)} → ${a.status} ${a.body.slice(0, 200)}`,
        );
      }
      covered.add(`${op.method} ${op.path}`);
      const key = `${op.method} ${op.path}`;
      msBy.set(key, (msBy.get(key) ?? 0) + performance.now() - t0);
    };
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
    planned.length = 0;
    oversized.clear();
    gc();
    const growth = process.memoryUsage().heapUsed - heapBefore;
    const seconds = (Date.now() - started) / 1000;
    t.diagnostic(
      `${sent} requests (${REQUESTS} random), ${covered.size} operations, ${seconds.toFixed(1)} s, heap growth ${(growth / 1048576).toFixed(1)} MiB, statuses ${JSON.stringify(Object.fromEntries([...statuses].sort((x, y) => x[0] - y[0])))}`,
    );
    t.diagnostic(
      `${operatorOnly.size} operator-only operations, every other round of them with the admin token: ${[...operatorOnly].join(", ")}`,
    );
    const slowest = [...msBy].sort((x, y) => y[1] - x[1]).slice(0, 5);
    t.diagnostic(
      `slowest operations (ms in total): ${slowest.map(([k, ms]) => `${k} ${ms.toFixed(0)}`).join(", ")}`,
    );
    assert.deepEqual(problems.slice(0, 40), [], `${problems.length} problems`);
    assert.equal(covered.size, ops.length, "every operation was fuzzed");
    assert.ok(ops.length >= 100, `the document lists ${ops.length} operations: fewer than the app serves`);
    const withLimit = ops.filter((o) => o["x-body-limit"] !== undefined && o["x-body-limit"] <= OVERSIZE_CAP);
    t.diagnostic(
      `${oversizedRefused.size} of ${withLimit.length} operations refused a body over their limit with 413 resource_exhausted`,
    );
    assert.equal(
      oversizedRefused.size,
      oversizedOps.size,
      "every route sent a body past its limit refused it",
    );
    assert.ok(
      oversizedOps.size >= withLimit.length / 2,
      "most routes with a body limit were sent one past it",
    );
    // The process is up and the app still serves (a crash would have ended the run before here).
    assert.equal((await fz.f.x.app.inject({ method: "GET", url: "/healthz" })).statusCode, 200);
    assert.ok(growth < HEAP_GROWTH_LIMIT, `heap grew ${growth} bytes`);
  });
});
