// The database service's logic tests: the real DatabaseService over the real
// sandbox service (pods), the real secret service and SQLite store of a
// sandboxWorld, with a fake agent whose readiness-check execs the test
// answers (answerChecks). Log lines are kept so a test can look for secrets.

import { Writable } from "node:stream";
import pino from "pino";
import { DatabaseService, type DatabaseServiceOptions } from "../../coordinator/databases/index.ts";
import { SecretService } from "../../coordinator/secrets/index.ts";
import { BerthError } from "../../shared/errors.ts";
import type { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { randomKey } from "../secrets/helpers.ts";
import { type SandboxWorld, sandboxWorld } from "../sandboxes/fakes.ts";

export interface DatabaseWorld {
  w: SandboxWorld;
  agent: FakeContainerApi;
  db: DatabaseService;
  secrets: SecretService;
  /** Every log line the database service wrote, as text. */
  logs: string[];
  /** Volumes removed through the service (workspace/name). */
  removedVolumes: string[];
  /** Image requests (workspace ids). */
  images: string[];
  /**
   * Answers the pods' readiness-check execs with exit codes from `codes`
   * (the last one repeats), until the test ends.
   */
  answerChecks(codes: number[]): { answered: () => number };
}

export async function databaseWorld(
  t: { after: (fn: () => unknown) => void },
  over: Partial<DatabaseServiceOptions> = {},
): Promise<DatabaseWorld> {
  // The pods read the secret from the same store: the service exists once the world does.
  let secrets: SecretService | undefined;
  const w = await sandboxWorld(t, {
    secrets: {
      resolve: (ws, names) => {
        if (!secrets) throw new Error("no secret service yet");
        return secrets.resolve(ws, names);
      },
    },
  });
  const agent = w.addAgent("agent-a", 8);
  secrets = new SecretService({ db: w.store.db, key: randomKey() });
  const logs: string[] = [];
  const removedVolumes: string[] = [];
  const images: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      logs.push(String(chunk));
      cb();
    },
  });
  const db = new DatabaseService({
    repo: w.store.databases,
    stubs: w.store.stubs,
    pods: w.svc,
    secrets,
    image: async (ws) => {
      images.push(ws);
      return "registry.test/berth/databases:1";
    },
    volumes: {
      remove: async (ws, name) => {
        if (removedVolumes.includes(`${ws}/${name}`))
          throw new BerthError("not_found", `volume ${name} not found`);
        removedVolumes.push(`${ws}/${name}`);
      },
    },
    log: pino({ level: "info" }, sink),
    readyPollMs: 1,
    ...over,
  });
  return {
    w,
    agent,
    db,
    secrets,
    logs,
    removedVolumes,
    images,
    answerChecks(codes) {
      let n = 0;
      let timer: NodeJS.Timeout | undefined;
      const tick = () => {
        for (const e of agent.execs) {
          if (e.finished) continue;
          e.finish(codes[Math.min(n, codes.length - 1)] ?? 0);
          n++;
        }
        timer = setTimeout(tick, 1);
      };
      tick();
      t.after(() => clearTimeout(timer));
      return { answered: () => n };
    },
  };
}
