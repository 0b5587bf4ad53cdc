import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "../../shared/net.ts";
import { connect, type NatsConnection } from "nats";
import { closeNats, type RunningNats, startNatsServer } from "../../shared/nats-server.ts";
import { clusterNatsUsers, type NatsCredentials } from "../../shared/subjects.ts";

export interface TestNats extends RunningNats {
  coordinator: NatsCredentials;
  agent: NatsCredentials;
  port: number;
  dir: string;
}

/** A real nats-server with JetStream on a free loopback port, stopped after the suite. */
export async function startTestNats(t: { after: (fn: () => unknown) => void }): Promise<TestNats> {
  // Not tempDir: the server must stop before its store is removed, whatever
  // order the caller runs its after-hooks in (node:test runs them first-in, first-out).
  const dir = mkdtempSync(join(tmpdir(), "berth-nats-"));
  const port = await freePort();
  const coordinatorPassword = randomBytes(12).toString("hex");
  const agentPassword = randomBytes(12).toString("hex");
  let nats: RunningNats;
  try {
    nats = await startNatsServer({
      dir,
      port,
      users: clusterNatsUsers({ coordinatorPassword, agentPassword }),
    });
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
  t.after(async () => {
    await nats.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  return {
    ...nats,
    port,
    dir,
    coordinator: { url: nats.url, user: "coordinator", password: coordinatorPassword },
    agent: { url: nats.url, user: "agent", password: agentPassword },
  };
}

/** A connection to the test server as the cluster's coordinator or (restricted) agent user, closed after the test. */
export async function connectTestNats(
  t: { after: (fn: () => unknown) => void },
  nats: TestNats,
  as: "coordinator" | "agent",
): Promise<NatsConnection> {
  const nc = await connect({ servers: nats.url, user: nats[as].user, pass: nats[as].password });
  t.after(() => closeNats(nc));
  return nc;
}
