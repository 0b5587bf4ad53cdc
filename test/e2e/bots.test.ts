// Bots end to end, on a real `berth up` cluster: a bot with
// two locations and one transition (test/fixtures/bots/bot_app.py) deployed
// with `berth deploy`; a session over the websocket drives a marker through
// the transition, which runs as a task in a container and asks the bot's
// model (the tiny bigram model of the /v1 tests) through the gateway; the
// coordinator is killed and started again, and the session's markers and
// history are still there and it goes on.

import assert from "node:assert/strict";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import { type BerthUp, restartCoordinator, startBerthUp, UP_COMMANDS } from "../helpers/berth-up.ts";
import { okJson as json, writeBigramApp } from "../helpers/bigram-app.ts";
import { needs } from "../helpers/env.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown } from "../network/helpers.ts";

const BOT_APP = fileURLToPath(new URL("../fixtures/bots/bot_app.py", import.meta.url));

interface Answer {
  question: string;
  text: string;
  words: number;
  container_id: string;
}

interface SessionJson {
  id: string;
  version: number;
  locations: Record<string, unknown[]>;
  in_flight: unknown[];
}

interface HistoryEntry {
  seq: number;
  kind: string;
  body: Record<string, unknown>;
}

function writeApps(dir: string): void {
  writeBigramApp(dir);
  copyFileSync(BOT_APP, join(dir, "bot_app.py"));
}

/** A session's websocket: every message it got, and a wait for one that matches. */
class SessionSocket {
  readonly messages: Record<string, unknown>[] = [];
  private constructor(readonly ws: WebSocket) {
    ws.on("message", (d) => this.messages.push(JSON.parse(d.toString()) as Record<string, unknown>));
  }

  static async open(url: string, token: string): Promise<SessionSocket> {
    const ws = new WebSocket(url, { headers: { authorization: `Bearer ${token}` } });
    const s = new SessionSocket(ws);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
      ws.once("unexpected-response", (_req, res) =>
        reject(new Error(`websocket refused: ${res.statusCode}`)),
      );
    });
    return s;
  }

  push(location: string, markers: unknown[]): void {
    this.ws.send(JSON.stringify({ type: "push", location, markers }));
  }

  next(
    match: (m: Record<string, unknown>) => boolean,
    what: string,
    from = 0,
  ): Promise<Record<string, unknown>> {
    return waitUntil(
      () => {
        const failed = this.messages.slice(from).find((m) => m.type === "transition" && m.state === "failed");
        if (failed) throw new Error(`a firing failed while waiting for ${what}: ${JSON.stringify(failed)}`);
        return this.messages.slice(from).find(match);
      },
      {
        timeoutMs: 300_000,
        intervalMs: 50,
        what,
        describe: () => `messages so far: ${JSON.stringify(this.messages)}`,
      },
    );
  }

  close(): void {
    this.ws.close();
  }
}

test("bots: a session over the websocket drives a marker through a transition and survives a coordinator restart", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up: BerthUp = await startBerthUp(td);
  writeApps(up.appDir);
  const ws = (await json<{ external_id: string }>(await up.api("/api/v1/workspace/current"))).external_id;
  for (const target of ["app.py:tiny", "bot_app.py:bot"]) {
    const r = await up.cli(["deploy", target]);
    assert.equal(r.code, 0, `berth deploy ${target}: ${r.stdout}\n${r.stderr}\n${up.output()}`);
    if (target.startsWith("bot_app"))
      assert.match(r.stdout, /websocket at ws:\/\/.*\/bot\/helper\/v1\/session/);
  }
  const wsUrl = `${up.url.replace(/^http/, "ws")}/bot/helper/session`;
  const session = async (id: string) =>
    json<{ session: SessionJson; history: HistoryEntry[] }>(await up.api(`/api/v1/bot/${ws}/sessions/${id}`));

  // A session: the question goes through the transition, which asks the model.
  const first = await SessionSocket.open(wsUrl, up.token);
  td.defer(() => first.close());
  const opened = (await first.next((m) => m.type === "session", "the session")).session as SessionJson;
  assert.deepEqual(opened.locations, { Question: [], Answer: [] });
  first.push("Question", [{ text: "Licensed under the" }]);
  const got = await first.next((m) => m.type === "markers" && m.location === "Answer", "the answer");
  const [answer] = got.markers as [Answer];
  assert.equal(answer.question, "Licensed under the");
  assert.equal(answer.words, 4, "the model's four words (max_tokens=4)");
  assert.ok(answer.container_id.length > 0, "it ran in a container (BERTH_CONTAINER_ID)");

  // The transition ran as a task in a container: its record names the container.
  const before = await session(opened.id);
  assert.deepEqual(
    before.history.map((h) => h.kind),
    ["created", "put", "take", "start", "finish"],
  );
  const taskId = before.history.find((h) => h.kind === "start")?.body.task_id as string;
  const task = await json<{ status: string; container_id: string }>(await up.api(`/v2/task/${taskId}/`));
  assert.equal(task.status, "COMPLETE");
  assert.equal(task.container_id, answer.container_id, "the task's container is the one the handler ran in");
  // The model was called through the /v1 gateway: a usage row of the workspace.
  const usage = await json<{ usage: { model: string; route: string; completion_tokens: number }[] }>(
    await up.api(`/api/v1/usage/${ws}?limit=100`),
  );
  assert.ok(
    usage.usage.some(
      (u) => u.model === "tiny-bigram" && u.route === "chat.completions" && u.completion_tokens === 4,
    ),
    `a usage row of the transition's model call: ${JSON.stringify(usage.usage)}`,
  );
  first.close();

  // The coordinator dies and comes back: the session is as it was, and goes on.
  await restartCoordinator(up);
  const after = await session(opened.id);
  assert.deepEqual(after.session.locations, before.session.locations);
  assert.deepEqual(after.history, before.history);
  const again = await SessionSocket.open(`${wsUrl}?session_id=${opened.id}`, up.token);
  td.defer(() => again.close());
  const resumed = (await again.next((m) => m.type === "session", "the resumed session"))
    .session as SessionJson;
  assert.equal(resumed.id, opened.id);
  assert.deepEqual(resumed.locations.Answer, [answer]);
  again.push("Question", [{ text: "of the" }]);
  const second = await again.next(
    (m) => m.type === "markers" && m.location === "Answer",
    "the second answer, after the restart",
  );
  assert.equal((second.markers as Answer[])[0]?.question, "of the");
  const end = await session(opened.id);
  assert.deepEqual(end.session.locations.Answer?.length, 2);
  assert.equal(end.history.filter((h) => h.kind === "finish").length, 2);
  again.close();
});
