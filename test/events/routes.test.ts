// The event routes over a listening server: history as CloudEvents with a
// cursor, workspace scoping (another workspace's token gets 404 and never
// sees these events), and the SSE stream: live events, heartbeats, resuming
// with from_id and Last-Event-ID, an unknown id refused.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { EventType } from "../../coordinator/events/types.ts";
import { readSse } from "../helpers/sse.ts";
import { perSuite } from "../helpers/suite.ts";
import { startEventHarness } from "./helpers.ts";
import { bearer } from "../helpers/auth.ts";

describe("event routes", () => {
  const h = perSuite((suite) => startEventHarness(suite, { heartbeatMs: 50 }));

  const get = (path: string, token = h.token, headers: Record<string, string> = {}) =>
    fetch(`${h.baseUrl}${path}`, { headers: { ...bearer(token), ...headers } });
  const publish = (type: EventType, subject: string, n: number, ws = h.ws) =>
    h.stream.publish({ type, workspaceId: ws.id, workspaceExternalId: ws.externalId, subject, data: { n } });

  test("history: CloudEvents, oldest first, paged by cursor; filters; bad input is a 400 naming it", async () => {
    for (let i = 0; i < 3; i++) publish("stub.deploy", `dep-${i}`, i);
    publish("stub.deploy", "theirs", 99, h.other);
    await h.stream.flush();
    const r1 = await get(`/api/v1/events/${h.ws.externalId}/history?limit=2`);
    assert.equal(r1.status, 200);
    const p1 = (await r1.json()) as { events: Record<string, unknown>[]; next_cursor: string | null };
    assert.deepEqual(
      p1.events.map((e) => (e.data as { n: number }).n),
      [0, 1],
    );
    const ce = p1.events[0] as Record<string, unknown>;
    assert.equal(ce.specversion, "1.0");
    assert.equal(ce.source, `/workspaces/${h.ws.externalId}`);
    assert.equal(ce.type, "stub.deploy");
    assert.equal(ce.subject, "dep-0");
    assert.equal(ce.datacontenttype, "application/json");
    assert.equal(ce.workspaceId, undefined);
    assert.ok(p1.next_cursor);
    const p2 = (await (
      await get(`/api/v1/events/${h.ws.externalId}/history?limit=2&cursor=${p1.next_cursor}`)
    ).json()) as { events: Record<string, unknown>[]; next_cursor: string | null };
    assert.deepEqual(
      p2.events.map((e) => (e.data as { n: number }).n),
      [2],
    );
    assert.equal(p2.next_cursor, null);

    const bad = await get(`/api/v1/events/${h.ws.externalId}/history?type=bogus`);
    assert.equal(bad.status, 400);
    const body = (await bad.json()) as { error: { code: string; message: string } };
    assert.equal(body.error.code, "invalid_request");
    assert.match(body.error.message, /bogus.*task\.complete/);
    assert.equal((await get(`/api/v1/events/${h.ws.externalId}/history?limit=0`)).status, 400);
  });

  test("another workspace's token gets 404 on both routes and its own history holds none of these", async () => {
    assert.equal((await get(`/api/v1/events/${h.ws.externalId}/history`, h.otherToken)).status, 404);
    assert.equal((await get(`/api/v1/events/${h.ws.externalId}/stream`, h.otherToken)).status, 404);
    assert.equal((await get(`/api/v1/events/${h.ws.externalId}/history`, "bt_nope")).status, 401);
    const own = (await (await get(`/api/v1/events/${h.other.externalId}/history`, h.otherToken)).json()) as {
      events: { subject: string }[];
    };
    assert.ok(own.events.length > 0);
    assert.ok(own.events.every((e) => e.subject === "theirs"));
  });

  test("stream: live events as SSE with heartbeats; resumes from from_id and from Last-Event-ID", async () => {
    const res = await get(`/api/v1/events/${h.ws.externalId}/stream`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^text\/event-stream/);
    // The consumer exists once the response has started: what is published now is live.
    publish("deployment.start", "live-0", 10);
    publish("stub.deploy", "theirs-live", 11, h.other);
    publish("deployment.stop", "live-1", 12);
    const { evs, comments } = await readSse(
      res,
      (e, c) => e.length >= 2 && c.filter((x) => x === "keep-alive").length >= 1,
    );
    assert.deepEqual(
      evs.map((e) => e.event),
      ["deployment.start", "deployment.stop"],
    );
    assert.ok(comments.includes("keep-alive"));
    const ce = JSON.parse(evs[0]?.data ?? "{}") as { id: string; subject: string };
    assert.equal(ce.id, evs[0]?.id);
    assert.equal(ce.subject, "live-0");

    // Resume after the first: the second comes again, then what follows.
    const first = evs[0]?.id as string;
    const resumed = await readSse(
      await get(`/api/v1/events/${h.ws.externalId}/stream?from_id=${first}`),
      (e) => e.length >= 1,
    );
    assert.equal(resumed.evs[0]?.id, evs[1]?.id);
    // Last-Event-ID wins over from_id (a reconnecting browser sends it).
    publish("deployment.delete", "live-2", 13);
    await h.stream.flush();
    const again = await readSse(
      await get(`/api/v1/events/${h.ws.externalId}/stream?from_id=${first}`, h.token, {
        "last-event-id": evs[1]?.id as string,
      }),
      (e) => e.length >= 1,
    );
    assert.equal(JSON.parse(again.evs[0]?.data ?? "{}").subject, "live-2");

    const unknown = await get(`/api/v1/events/${h.ws.externalId}/stream?from_id=evt-nosuchevent`);
    assert.equal(unknown.status, 400);
    assert.match(
      ((await unknown.json()) as { error: { message: string } }).error.message,
      /unknown event id/,
    );
  });
});
