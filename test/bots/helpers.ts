// What the bot tests share: a bot definition, a directory that knows it in
// one workspace, and tasks answered by the test as a runner would (each
// submitted task's JSON payload is answered by a function of the test).

import type { BotDirectory, BotTasks } from "../../coordinator/bots/engine.ts";
import type { TaskRecord } from "../../coordinator/tasks/store.ts";
import type { TaskUpdate } from "../../coordinator/tasks/service.ts";
import type { BotDefinition } from "../../shared/bots.ts";
import { BerthError } from "../../shared/errors.ts";

export const DEF: BotDefinition = {
  model: "tiny-bigram",
  description: null,
  locations: [
    { marker: "Question", expose: true },
    { marker: "Answer", expose: true },
    { marker: "Note", expose: false },
  ],
  transitions: [
    {
      name: "answer",
      inputs: { Question: 1 },
      outputs: ["Answer"],
      description: null,
      stub_id: "stub-answer",
    },
  ],
};

/** Tasks answered by `answer(payload)`; `hold` keeps them running until released. */
export class TestTasks implements BotTasks {
  readonly tasks = new Map<string, TaskRecord>();
  readonly payloads = new Map<
    string,
    { session: Record<string, unknown>; inputs: Record<string, unknown[]> }
  >();
  private readonly watchers = new Map<string, Set<(u: TaskUpdate) => void>>();
  hold = false;
  constructor(private readonly answer: (p: { inputs: Record<string, unknown[]> }) => unknown) {}

  async submit(workspaceId: string, stubId: string, inputs: Uint8Array[]): Promise<string[]> {
    const id = `task-${this.tasks.size + 1}`;
    const now = new Date().toISOString();
    this.tasks.set(id, {
      id,
      workspaceId,
      stubId,
      status: "PENDING",
      attempt: 1,
      containerId: null,
      agentId: null,
      streamSeq: null,
      headless: false,
      callbackUrl: null,
      expiresAt: null,
      error: null,
      result: null,
      resultJson: null,
      createdAt: now,
      startedAt: null,
      endedAt: null,
      updatedAt: now,
      tokenId: null,
    });
    this.payloads.set(id, JSON.parse(Buffer.from(inputs[0] as Uint8Array).toString()));
    if (!this.hold) setImmediate(() => this.run(id));
    return [id];
  }

  run(id: string): void {
    const t = this.tasks.get(id) as TaskRecord;
    const p = this.payloads.get(id) as { inputs: Record<string, unknown[]> };
    let answer: unknown;
    try {
      answer = this.answer(p);
      Object.assign(t, { status: "COMPLETE", resultJson: JSON.stringify(answer), containerId: "ctr-test" });
    } catch (e) {
      Object.assign(t, {
        status: "FAILED",
        error: { type: "ValueError", message: (e as Error).message, traceback: "" },
      });
    }
    for (const fn of this.watchers.get(id) ?? [])
      fn({
        type: "result",
        taskId: id,
        status: t.status,
        result: null,
        resultJson: t.resultJson,
        error: t.error,
      });
  }

  watch(ids: Iterable<string>, fn: (u: TaskUpdate) => void): () => void {
    const list = [...ids];
    for (const id of list) {
      const set = this.watchers.get(id) ?? new Set();
      this.watchers.set(id, set);
      set.add(fn);
    }
    return () => {
      for (const id of list) this.watchers.get(id)?.delete(fn);
    };
  }

  async getTask(workspaceId: string, id: string): Promise<TaskRecord> {
    const t = this.tasks.get(id);
    if (!t || t.workspaceId !== workspaceId) throw new BerthError("not_found", `task ${id} not found`);
    return { ...t };
  }
}

export const directory = (ws: string): BotDirectory => ({
  async byName(workspaceId, name) {
    if (workspaceId !== ws || name !== "helper")
      throw new BerthError("not_found", `deployment ${name} not found`);
    return { deploymentId: "dep-1", name, authorized: true, def: DEF };
  },
});

/** The bot the workspace-scoping fixture serves: deployed (as DEF) in every workspace. */
export const BOT_NAME = "helper";
export const anyWorkspaceDirectory: BotDirectory = {
  async byName(_workspaceId, name) {
    if (name !== BOT_NAME) throw new BerthError("not_found", `deployment ${name} not found`);
    return { deploymentId: "dep-1", name, authorized: true, def: DEF };
  },
};

export const upper = (p: { inputs: Record<string, unknown[]> }) => {
  const q = p.inputs.Question?.[0] as { text: string };
  if (q.text === "fail") throw new Error("cannot answer that");
  return { Answer: [{ text: q.text.toUpperCase() }] };
};
