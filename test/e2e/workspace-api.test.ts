// The workspace API end to end, against a real `berth up` cluster: a webhook on
// `task.*` receives CloudEvents of a function run that the `cloudevents` npm
// SDK parses and whose signatures verify; the same events are in the events
// history; the logs route finds the line the function printed; the OpenAPI
// document validates; another workspace's token gets nothing.

import assert from "node:assert/strict";
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingHttpHeaders } from "node:http";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import SwaggerParser from "@apidevtools/swagger-parser";
import { type CloudEvent, HTTP } from "cloudevents";
import { freePort, waitFor } from "../../shared/net.ts";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const APP = (marker: string) => `
import sys
from berth import function

@function(cpu=0.25, memory=128)
def greet(name):
    print("${marker}", name, flush=True)
    return "hello " + name

if __name__ == "__main__":
    print("result:", greet.remote(sys.argv[1]))
`;
import { bearer } from "../helpers/auth.ts";

interface Delivery {
  headers: IncomingHttpHeaders;
  body: string;
}

async function receiver(td: Teardown) {
  const got: Delivery[] = [];
  const port = await freePort();
  const server = createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      got.push({ headers: req.headers, body });
      res.end();
    });
  });
  await new Promise<void>((r) => server.listen(port, "127.0.0.1", r));
  td.defer(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${port}/hook`, got };
}

function signatureVerifies(d: Delivery, secret: string): boolean {
  const want = Buffer.from(`sha256=${createHmac("sha256", secret).update(d.body).digest("hex")}`);
  const have = Buffer.from(String(d.headers["x-service-signature"] ?? ""));
  return want.length === have.length && timingSafeEqual(want, have);
}

test("workspace API end to end: signed CloudEvents of a function run, history, logs, OpenAPI, scoping", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;
  const hooks = await receiver(td);
  const marker = `marker-${randomBytes(6).toString("hex")}`;
  writeFileSync(join(up.appDir, "app.py"), APP(marker));

  const created = await up.api(`/api/v1/webhook/${ws}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ url: hooks.url, event_types: ["task.*"], description: "task events" }),
  });
  assert.equal(created.status, 201);
  const secret = ((await created.json()) as { signing_secret: string }).signing_secret;

  const out = await up.python(["app.py", "ada"]);
  assert.match(out, /^result: hello ada$/m, out);

  let taskId = "";
  await t.test("the webhook's deliveries parse as CloudEvents and their signatures verify", async () => {
    await waitFor(() => hooks.got.some((d) => d.headers["x-service-event"] === "task.complete"), {
      timeoutMs: 60_000,
      what: "the task.complete delivery",
    });
    const events: CloudEvent<Record<string, unknown>>[] = [];
    for (const d of hooks.got) {
      assert.equal(d.headers["content-type"], "application/cloudevents+json");
      assert.ok(signatureVerifies(d, secret), "X-Service-Signature verifies with the whsec_ secret");
      const headers = Object.fromEntries(Object.entries(d.headers).map(([k, v]) => [k, String(v)]));
      const ce = HTTP.toEvent({ headers, body: d.body }) as CloudEvent<Record<string, unknown>>;
      assert.equal(ce.specversion, "1.0");
      assert.equal(ce.type, d.headers["x-service-event"]);
      assert.equal(ce.id, d.headers["x-service-delivery"]);
      assert.equal(ce.source, `/workspaces/${ws}`);
      assert.ok(ce.type.startsWith("task."), ce.type);
      events.push(ce);
    }
    const complete = events.find((e) => e.type === "task.complete") as CloudEvent<Record<string, unknown>>;
    taskId = complete.subject as string;
    assert.equal(complete.data?.status, "COMPLETE");
    const types = events.filter((e) => e.subject === taskId).map((e) => e.type);
    assert.ok(types.includes("task.created") && types.includes("task.running"), types.join(" "));

    const history = (await (await up.api(`/api/v1/events/${ws}/history?type=task.*&limit=500`)).json()) as {
      events: { id: string; type: string; subject: string }[];
    };
    for (const e of events)
      assert.ok(
        history.events.some((h) => h.id === e.id),
        `${e.type} ${e.id} is in the history`,
      );
  });

  await t.test("the logs route finds the line the function printed, with its task", async () => {
    let lines: { line: string; task_id: string | null; stub_id: string }[] = [];
    await waitFor(
      async () => {
        const r = await up.api(`/api/v1/logs/${ws}?text=${marker}`);
        lines = ((await r.json()) as { lines: typeof lines }).lines ?? [];
        return lines.length > 0;
      },
      { timeoutMs: 30_000, what: "the printed line in the logs" },
    );
    assert.match(lines[0]?.line ?? "", new RegExp(`${marker} ada`));
    assert.equal(lines[0]?.task_id, taskId);
    const byTask = (await (await up.api(`/api/v1/logs/${ws}?task_id=${taskId}`)).json()) as {
      lines: unknown[];
    };
    assert.ok(byTask.lines.length >= 1);
  });

  await t.test("the OpenAPI document validates", async () => {
    const r = await fetch(`${up.url}/api/v1/openapi.json`);
    assert.equal(r.status, 200);
    const doc = (await r.json()) as { openapi: string; paths: Record<string, unknown> };
    assert.match(doc.openapi, /^3\./);
    for (const p of [
      "/api/v1/task/{ws}",
      "/api/v1/logs/{ws}",
      "/api/v1/events/{ws}/history",
      "/api/v1/webhook/{ws}",
    ])
      assert.ok(doc.paths[p], `${p} is documented`);
    await SwaggerParser.validate(structuredClone(doc) as never);
  });

  await t.test("another workspace's token gets nothing of this workspace", async () => {
    const made = await up.api("/api/v1/workspace", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ name: "other" }),
    });
    const other = ((await made.json()) as { token: string }).token;
    for (const path of [
      `/api/v1/events/${ws}/history`,
      `/api/v1/logs/${ws}?text=${marker}`,
      `/api/v1/webhook/${ws}`,
      `/api/v1/task/${ws}`,
      `/api/v1/task/${ws}/${taskId}`,
      `/api/v1/container/${ws}`,
      `/api/v1/workspace/${ws}/limits`,
    ]) {
      const r = await fetch(`${up.url}${path}`, { headers: bearer(other) });
      assert.equal(r.status, 404, path);
      assert.doesNotMatch(await r.text(), new RegExp(marker));
    }
    const mine = await fetch(`${up.url}/v2/task/${taskId}/`, { headers: bearer(other) });
    assert.equal(mine.status, 404);
  });
});
