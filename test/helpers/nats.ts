import { randomBytes } from "node:crypto";
import { freePort } from "../../shared/net.ts";
import { type RunningNats, startNatsServer } from "../../shared/nats-server.ts";
import { clusterNatsUsers, type NatsCredentials } from "../../shared/subjects.ts";
import { tempDir } from "./env.ts";

export interface TestNats extends RunningNats {
  coordinator: NatsCredentials;
  agent: NatsCredentials;
  port: number;
  dir: string;
}

/** A real nats-server with JetStream on a free loopback port, stopped after the suite. */
export async function startTestNats(t: { after: (fn: () => unknown) => void }): Promise<TestNats> {
  const dir = tempDir(t, "berth-nats-");
  const port = await freePort();
  const coordinatorPassword = randomBytes(12).toString("hex");
  const agentPassword = randomBytes(12).toString("hex");
  const nats = await startNatsServer({
    dir,
    port,
    users: clusterNatsUsers({ coordinatorPassword, agentPassword }),
  });
  t.after(() => nats.stop());
  return {
    ...nats,
    port,
    dir,
    coordinator: { url: nats.url, user: "coordinator", password: coordinatorPassword },
    agent: { url: nats.url, user: "agent", password: agentPassword },
  };
}
