// The spec's "Stub configuration (decoded stub.config)" table as data, and a
// check of a decoded config against it: every field the table lists is
// there, of the type it gives, and nothing else is.

import assert from "node:assert/strict";

type Kind = "integer" | "string" | "boolean" | "array-or-null" | "handler" | "timestamp";

/** Field path → the type the spec's table gives it. */
export const SPEC_STUB_CONFIG: Readonly<Record<string, Kind>> = {
  "runtime.cpu": "integer",
  "runtime.gpu": "string",
  "runtime.memory": "integer",
  "runtime.image_id": "string",
  handler: "handler",
  on_start: "string",
  python_version: "string",
  keep_warm_seconds: "integer",
  max_pending_tasks: "integer",
  callback_url: "string",
  "task_policy.max_retries": "integer",
  "task_policy.timeout": "integer",
  "task_policy.expires": "timestamp",
  workers: "integer",
  authorized: "boolean",
  volumes: "array-or-null",
  "autoscaler.type": "string",
  "autoscaler.max_containers": "integer",
  "autoscaler.tasks_per_container": "integer",
};

function leaves(o: Record<string, unknown>, prefix = ""): string[] {
  return Object.entries(o).flatMap(([k, v]) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? leaves(v as Record<string, unknown>, `${prefix}${k}.`)
      : [`${prefix}${k}`],
  );
}

function at(o: Record<string, unknown>, path: string): unknown {
  return path.split(".").reduce<unknown>((v, k) => (v as Record<string, unknown> | undefined)?.[k], o);
}

/**
 * Checks each field of the table: present, of its type. `task_policy.expires`
 * is an ISO 8601 timestamp, or "" for a task that never expires.
 */
export function checkStubConfigAgainstSpec(config: Record<string, unknown>): void {
  assert.deepEqual(
    leaves(config).sort(),
    Object.keys(SPEC_STUB_CONFIG).sort(),
    "the spec's fields, no others",
  );
  for (const [path, kind] of Object.entries(SPEC_STUB_CONFIG)) {
    const v = at(config, path);
    const where = `${path} = ${JSON.stringify(v)}`;
    switch (kind) {
      case "integer":
        assert.ok(Number.isInteger(v), `${where} is not an integer`);
        break;
      case "string":
        assert.equal(typeof v, "string", `${where} is not a string`);
        break;
      case "boolean":
        assert.equal(typeof v, "boolean", `${where} is not a boolean`);
        break;
      case "array-or-null":
        assert.ok(v === null || Array.isArray(v), `${where} is neither an array nor null`);
        break;
      case "handler":
        assert.match(String(v), /^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$/, `${where} is not <module>:<function>`);
        break;
      case "timestamp":
        assert.equal(typeof v, "string", `${where} is not a string`);
        if (v !== "")
          assert.ok(
            /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/.test(v as string),
            `${where} is not an ISO 8601 timestamp`,
          );
        break;
    }
  }
}
