// The OpenAPI document at /api/v1/openapi.json: served without a token,
// valid OpenAPI 3.1 (swagger-parser), a bearer security scheme, and every
// /api/v1 operation with tags and response schemas. Also the cursor helper.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import SwaggerParser from "@apidevtools/swagger-parser";
import { decodeCursor, encodeCursor, paginate, pageRequest } from "../../coordinator/http/pagination.ts";
import { tagOf } from "../../coordinator/edge/openapi.ts";
import { BerthError } from "../../shared/errors.ts";
import { type HttpHarness, startHttpHarness } from "./harness.ts";

interface Op {
  tags?: string[];
  security?: unknown[];
  responses?: Record<string, { content?: Record<string, { schema?: unknown }> }>;
}

describe("OpenAPI document", () => {
  let x: HttpHarness;
  let doc: {
    openapi: string;
    paths: Record<string, Record<string, Op>>;
    components: { securitySchemes: Record<string, unknown> };
    security: unknown[];
  };
  const cleanups: (() => unknown)[] = [];

  after(async () => {
    for (const fn of cleanups) await fn();
  });
  before(async () => {
    x = await startHttpHarness({ after: (fn) => cleanups.push(fn) });
    const r = await x.app.inject({ method: "GET", url: "/api/v1/openapi.json" });
    assert.equal(r.statusCode, 200, "served without a token");
    doc = r.json();
  });

  test("validates as OpenAPI 3.1 (a deep copy: the parser dereferences in place)", async () => {
    assert.equal(doc.openapi, "3.1.0");
    await SwaggerParser.validate(structuredClone(doc) as never);
  });

  test("bearer auth by default; public routes say they need none", () => {
    assert.deepEqual(doc.components.securitySchemes.bearerAuth, {
      type: "http",
      scheme: "bearer",
      description: "a workspace token: `Authorization: Bearer <token>`",
    });
    assert.deepEqual(doc.security, [{ bearerAuth: [] }]);
    assert.deepEqual(doc.paths["/healthz"]?.get?.security, []);
    assert.equal(doc.paths["/api/v1/task/{ws}"]?.get?.security, undefined);
  });

  test("every /api/v1 operation has tags and a response schema for its success and errors", () => {
    const ops = Object.entries(doc.paths)
      .filter(([p]) => p.startsWith("/api/v1/"))
      .flatMap(([p, item]) =>
        Object.entries(item).map(([m, op]) => ({ what: `${m.toUpperCase()} ${p}`, op })),
      );
    assert.ok(ops.length > 30);
    for (const { what, op } of ops) {
      assert.ok(op.tags && op.tags.length > 0, `${what} has tags`);
      const codes = Object.keys(op.responses ?? {});
      assert.ok(codes.length > 0, `${what} declares responses`);
      assert.ok(
        codes.some((c) => c.startsWith("4")),
        `${what} declares its errors`,
      );
    }
    const list = doc.paths["/api/v1/task/{ws}"]?.get;
    const schema = list?.responses?.["200"]?.content?.["application/json"]?.schema as {
      properties: Record<string, unknown>;
    };
    assert.ok(schema.properties.next_cursor, "lists carry next_cursor");
    assert.deepEqual(list?.tags, ["tasks"]);
  });

  test("a route without its own tags is tagged by its area", () => {
    assert.equal(tagOf("/api/v1/webhook/:ws"), "webhook");
    assert.equal(tagOf("/v2/task/:taskId/"), "tasks");
    assert.equal(tagOf("/healthz"), "healthz");
    assert.deepEqual(doc.paths["/api/v1/secret/{ws}"]?.get?.tags, ["secret"]);
  });
});

describe("cursor pagination helper", () => {
  const items = Array.from({ length: 7 }, (_, i) => ({ id: `x-${i}`, at: i % 3 }));
  const key = (t: { id: string; at: number }) => [t.at, t.id];

  test("pages an in-memory list by keyset in either order, with ties", () => {
    for (const order of ["asc", "desc"] as const) {
      const seen: string[] = [];
      let cursor: string | undefined;
      for (;;) {
        const page = paginate(
          "things",
          items,
          key,
          pageRequest("things", { limit: 3, ...(cursor ? { cursor } : {}) }, 2),
          order,
        );
        seen.push(...page.items.map((t) => t.id));
        if (!page.next_cursor) break;
        cursor = page.next_cursor;
      }
      assert.equal(new Set(seen).size, 7, order);
      const ats = seen.map((id) => items.find((t) => t.id === id)?.at as number);
      assert.deepEqual(
        ats,
        [...ats].sort((a, b) => (order === "asc" ? a - b : b - a)),
        order,
      );
    }
    assert.equal(paginate("things", items, key, { limit: 7, after: undefined }).next_cursor, null);
    assert.equal(pageRequest("things", {}, 2).limit, 50);
  });

  test("cursors are opaque base64url, bound to their list, checked", () => {
    const c = encodeCursor("tasks", ["2025-01-01T00:00:00.000Z", "task-1"]);
    assert.match(c, /^[A-Za-z0-9_-]+$/);
    assert.deepEqual(decodeCursor("tasks", c, 2), ["2025-01-01T00:00:00.000Z", "task-1"]);
    const refused = (f: () => unknown, re: RegExp) =>
      assert.throws(
        f,
        (e: unknown) => e instanceof BerthError && e.code === "invalid_request" && re.test(e.message),
      );
    refused(() => decodeCursor("apps", c, 2), /belongs to another list \(tasks\), not apps/);
    refused(() => decodeCursor("tasks", c, 1), /position is malformed/);
    refused(() => decodeCursor("tasks", "a+b/", 2), /not base64url/);
    refused(
      () => decodeCursor("tasks", Buffer.from("[1]").toString("base64url"), 2),
      /not a cursor of this API/,
    );
    refused(() => decodeCursor("tasks", "zzzz", 2), /not a cursor of this API/);
  });
});
