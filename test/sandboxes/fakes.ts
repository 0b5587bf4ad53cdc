// The sandbox service's logic tests: a world with a real SQLite store, a real
// FleetView and a clock the test moves, over agents that keep containers,
// files and snapshots in memory (the shared FakeContainerApi, whose execs the
// test drives).

import pino from "pino";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { SandboxService } from "../../coordinator/sandboxes/service.ts";
import type { SandboxServiceOptions } from "../../coordinator/sandboxes/types.ts";
import { Store } from "../../coordinator/records.ts";
import type { StubRecord } from "../../coordinator/tasks/stub-store.ts";
import { BerthError } from "../../shared/errors.ts";
import type { ContainerEventMessage } from "../../shared/subjects.ts";
import type { StubExtra } from "../../shared/tasks.ts";
import { capacity } from "../containers/fakes.ts";
import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { tempDir } from "../helpers/env.ts";
import { stubConfig, stubExtra } from "../tasks/fixtures.ts";

export interface SandboxWorld {
  store: Store;
  svc: SandboxService;
  fleet: FleetView;
  agents: Map<string, FakeContainerApi>;
  clock: { now: number };
  ws: string;
  otherWs: string;
  emit(e: Omit<ContainerEventMessage, "at">): void;
  /** An agent that, as one from before ExposePort, does not serve it (withExposePort() makes it). */
  addAgent(id: string, cores?: number): FakeContainerApi;
  stub(
    name: string,
    type: string,
    extra?: Partial<StubExtra> & { env?: Record<string, string> },
  ): Promise<StubRecord>;
}

/** A sandbox service over a real SQLite store and fake agents. */
export async function sandboxWorld(
  t: { after: (fn: () => unknown) => void },
  over: Partial<SandboxServiceOptions> = {},
): Promise<SandboxWorld> {
  const store = await Store.open(`sqlite:${tempDir(t)}/berth.db`);
  const clock = { now: Date.UTC(2030, 0, 1) };
  const fleet = new FleetView({ minLostAfterMs: 3_600_000 });
  const agents = new Map<string, FakeContainerApi>();
  let handler: ((e: ContainerEventMessage) => void) | undefined;
  const svc = new SandboxService({
    repo: store.sandboxes,
    stubs: store.stubs,
    fleet,
    agents: {
      client: (id) => {
        const a = agents.get(id);
        if (!a) throw new BerthError("unavailable", `no agent ${id}`);
        return a;
      },
    },
    code: {
      open: () => {
        throw new Error("no code in these tests");
      },
    },
    events: {
      subscribe: (h) => {
        handler = h;
        return () => {
          handler = undefined;
        };
      },
    },
    publicUrl: "https://berth.example/",
    log: pino({ level: "silent" }),
    clock: () => clock.now,
    sweepIntervalMs: 3_600_000,
    touchEveryMs: 1,
    stopGraceMs: 0,
    // Refuse at once when full, unless a test asks for the wait.
    placementWaitMs: 0,
    // Pod creates answer at once unless a test checks the settle wait (pod-settle.ts).
    podSettleMs: 0,
    ...over,
  });
  svc.open();
  const ws = (await store.workspaces.create("sb-main")).id;
  const otherWs = (await store.workspaces.create("sb-other")).id;
  t.after(async () => {
    await svc.close();
    await store.close();
  });
  return {
    store,
    svc,
    fleet,
    agents,
    clock,
    ws,
    otherWs,
    emit: (e) => handler?.({ at: clock.now, ...e }),
    addAgent(id, cores = 4) {
      const a = new FakeContainerApi({ agentId: id, servesExposePort: false, now: () => clock.now });
      agents.set(id, a);
      fleet.observe(
        {
          agentId: id,
          hostname: id,
          version: "t",
          sentAt: Date.now(),
          intervalMs: 600_000,
          grpcAddress: "127.0.0.1:1",
          capacity: capacity(cores, 8),
        },
        Date.now(),
      );
      return a;
    },
    async stub(name, type, extra = {}) {
      return (
        await store.stubs.upsert(ws, {
          name,
          type,
          config: stubConfig({ handler: "" }),
          extra: stubExtra(extra),
          objectId: null,
        })
      ).stub;
    },
  };
}
