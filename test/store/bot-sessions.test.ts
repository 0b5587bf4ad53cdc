import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Store } from "../../coordinator/records.ts";
import { BerthError } from "../../shared/errors.ts";
import { openSuiteDatabase, STORE_ENGINES } from "../helpers/engines.ts";

// Bot sessions (coordinator/store/bot-sessions.ts) on both engines: markers
// move through take/finish/fail, history is kept, other workspaces see
// nothing, and everything is there after the store is reopened (a restart).

const code = (c: string) => (e: unknown) => e instanceof BerthError && e.code === c;

for (const engine of STORE_ENGINES) {
  describe(`bot sessions on ${engine.name}`, async () => {
    const { store, url } = await openSuiteDatabase(engine);
    const ws = (await store.workspaces.create("bots")).id;
    const other = (await store.workspaces.create("elsewhere")).id;

    test("a marker moves through a transition and the session survives a reopen", async () => {
      const s = await store.botSessions.create(ws, "helper", ["Question", "Answer"]);
      assert.deepEqual(s.state, { locations: { Question: [], Answer: [] }, inFlight: {} });
      await store.botSessions.put(ws, s.id, "Question", [{ text: "hi" }]);
      const t = await store.botSessions.take(ws, s.id, "answer", { Question: 1 });
      assert.deepEqual(t.taken, { Question: [{ text: "hi" }] });
      assert.deepEqual(
        t.session.state.locations,
        { Question: [], Answer: [] },
        "a taken marker is in no location",
      );
      const taken = t.session.state.inFlight[String(t.firing)];
      assert.deepEqual({ ...taken, at: undefined }, { transition: "answer", taken: t.taken, at: undefined });
      assert.ok(Number.isFinite(Date.parse(taken?.at ?? "")), "when it was taken");
      assert.deepEqual(
        (await store.botSessions.withFiringsInFlight()).map((x) => x.id),
        [s.id],
        "a session with a firing in flight is found (a starting coordinator picks it up)",
      );
      await store.botSessions.start(ws, s.id, t.firing, "task-1");
      assert.equal(
        (await store.botSessions.get(ws, s.id))?.state.inFlight[String(t.firing)]?.taskId,
        "task-1",
      );
      await store.botSessions.finish(ws, s.id, t.firing, { Answer: [{ text: "HI" }] });
      assert.deepEqual(await store.botSessions.withFiringsInFlight(), [], "none once it finished");

      const reopened = await Store.open(url);
      try {
        const back = await reopened.botSessions.get(ws, s.id);
        assert.deepEqual(back?.state, {
          locations: { Question: [], Answer: [{ text: "HI" }] },
          inFlight: {},
        });
        assert.equal(back?.botName, "helper");
        const h = await reopened.botSessions.history(ws, s.id);
        assert.deepEqual(
          h.map((e) => [e.seq, e.kind]),
          [
            [1, "created"],
            [2, "put"],
            [3, "take"],
            [4, "start"],
            [5, "finish"],
          ],
        );
        assert.deepEqual(h[3]?.body, { firing: 3, transition: "answer", task_id: "task-1" });
        assert.deepEqual(h[4]?.body, {
          firing: 3,
          transition: "answer",
          outputs: { Answer: [{ text: "HI" }] },
        });
      } finally {
        await reopened.close();
      }
    });

    test("a failed firing puts its markers back in front; a finished one cannot finish again", async () => {
      const s = await store.botSessions.create(ws, "helper", ["Question", "Answer"]);
      await store.botSessions.put(ws, s.id, "Question", [{ n: 1 }, { n: 2 }, { n: 3 }]);
      const t = await store.botSessions.take(ws, s.id, "pair", { Question: 2 });
      assert.deepEqual(t.taken, { Question: [{ n: 1 }, { n: 2 }] }, "oldest first");
      const back = await store.botSessions.fail(ws, s.id, t.firing, "the container exited 1");
      assert.deepEqual(back.state.locations.Question, [{ n: 1 }, { n: 2 }, { n: 3 }]);
      assert.deepEqual(back.state.inFlight, {});
      await assert.rejects(store.botSessions.finish(ws, s.id, t.firing, {}), code("failed_precondition"));
      const h = await store.botSessions.history(ws, s.id);
      assert.deepEqual(h.at(-1)?.body, {
        firing: t.firing,
        transition: "pair",
        error: "the container exited 1",
      });
    });

    test("bad requests name the cause and change nothing", async () => {
      const s = await store.botSessions.create(ws, "helper", ["Question", "Answer"]);
      await store.botSessions.put(ws, s.id, "Question", [{ n: 1 }]);
      await assert.rejects(store.botSessions.take(ws, s.id, "pair", { Question: 2 }), (e: unknown) => {
        assert.ok(code("failed_precondition")(e));
        assert.match((e as Error).message, /needs 2 Question marker\(s\); the session has 1/);
        return true;
      });
      await assert.rejects(
        store.botSessions.put(ws, s.id, "Nope", [{}]),
        /no location Nope \(its locations: Question, Answer\)/,
      );
      await assert.rejects(store.botSessions.take(ws, s.id, "t", { Question: 0 }), code("invalid_request"));
      const t = await store.botSessions.take(ws, s.id, "answer", { Question: 1 });
      await assert.rejects(
        store.botSessions.finish(ws, s.id, t.firing, { Nope: [{}] }),
        code("invalid_request"),
      );
      const now = await store.botSessions.get(ws, s.id);
      assert.deepEqual(now?.state.locations, { Question: [], Answer: [] });
      assert.ok(now?.state.inFlight[String(t.firing)], "the refused finish left the firing in flight");
      await assert.rejects(store.botSessions.create(ws, "b", []), code("invalid_request"));
      await assert.rejects(store.botSessions.create(ws, "b", ["A", "A"]), code("invalid_request"));
    });

    test("another workspace's session is not found", async () => {
      const s = await store.botSessions.create(ws, "helper", ["Question"]);
      assert.equal(await store.botSessions.get(other, s.id), undefined);
      await assert.rejects(store.botSessions.put(other, s.id, "Question", [{}]), code("not_found"));
      await assert.rejects(store.botSessions.history(other, s.id), code("not_found"));
      assert.deepEqual((await store.botSessions.get(ws, s.id))?.state.locations, { Question: [] });
    });

    test("concurrent firings of one session each take distinct markers", async () => {
      const s = await store.botSessions.create(ws, "helper", ["Question", "Answer"]);
      await store.botSessions.put(ws, s.id, "Question", [{ n: 1 }, { n: 2 }, { n: 3 }, { n: 4 }]);
      const takes = await Promise.all(
        [1, 2, 3, 4].map(() => store.botSessions.take(ws, s.id, "answer", { Question: 1 })),
      );
      const taken = takes.map((t) => (t.taken.Question?.[0] as { n: number } | undefined)?.n ?? 0).sort();
      assert.deepEqual(taken, [1, 2, 3, 4]);
      await Promise.all(
        takes.map((t) => store.botSessions.finish(ws, s.id, t.firing, { Answer: t.taken.Question ?? [] })),
      );
      const end = await store.botSessions.get(ws, s.id);
      assert.equal(end?.state.locations.Answer?.length, 4);
      assert.deepEqual(end?.state.inFlight, {});
    });
  });
}
