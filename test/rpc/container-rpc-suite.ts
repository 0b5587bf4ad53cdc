// Runs a set of container RPC tests over both transports (unix socket, TCP
// with mutual TLS) against an in-memory ContainerApi, each transport with a
// fake of its own (transportFake).

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe } from "node:test";
import { AgentRpcClient } from "../../api/grpc/index.ts";
import { type AgentRpcServer, startAgentRpcServer } from "../../agent/rpc/server.ts";
import { ClusterPki } from "../../coordinator/pki/cluster-pki.ts";
import { BerthError } from "../../shared/errors.ts";
import { type FakeContainerApi, transportFake } from "../helpers/fake-container-api.ts";
import { memoryStore } from "../helpers/store.ts";
import { FakeAgent } from "./fake-agent.ts";

export const isBerth = (code: string, message?: RegExp) => (e: unknown) =>
  e instanceof BerthError && e.code === code && (!message || message.test(e.message));

export async function collect<T>(it: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = [];
  for await (const x of it) out.push(x);
  return out;
}

/** Filled in by the suite's before(): read it inside tests only. */
export interface Harness {
  client: AgentRpcClient;
  fake: FakeContainerApi;
}

interface Setup {
  client: AgentRpcClient;
  server: AgentRpcServer;
  cleanup?: () => void;
}

async function overUnixSocket(fake: FakeContainerApi): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), "berth-ctr-rpc-"));
  const cleanup = () => rmSync(dir, { recursive: true, force: true });
  const path = join(dir, "agent.sock");
  const server = await startAgentRpcServer({
    impl: new FakeAgent(),
    containers: fake,
    unixSocket: path,
  }).catch((e: unknown) => {
    cleanup();
    throw e;
  });
  return { server, cleanup, client: new AgentRpcClient({ address: `unix://${path}` }) };
}

async function overMutualTls(fake: FakeContainerApi): Promise<Setup> {
  const pki = await ClusterPki.load(memoryStore());
  const agentCert = await pki.issueAgentCert("agent-ctr1", { ipAddresses: ["127.0.0.1"] });
  const clientCert = await pki.issueCoordinatorClientCert();
  const server = await startAgentRpcServer({
    impl: new FakeAgent(),
    containers: fake,
    tcp: { host: "127.0.0.1", port: 0, tls: { caPem: pki.caPem, ...agentCert } },
  });
  const client = new AgentRpcClient({
    address: `127.0.0.1:${server.tcpPort}`,
    tls: { caPem: pki.caPem, ...clientCert },
  });
  return { server, client };
}

/** `tests` registers its tests once per transport, under "<what> over <transport>". */
export function containerSuites(what: string, tests: (h: Harness) => void): void {
  const transports: [string, (fake: FakeContainerApi) => Promise<Setup>][] = [
    ["the unix socket", overUnixSocket],
    ["TCP with mutual TLS", overMutualTls],
  ];
  for (const [name, setup] of transports) {
    describe(`${what} over ${name}`, () => {
      const h = {} as Harness;
      let s: Setup | undefined;
      before(async () => {
        h.fake = transportFake();
        s = await setup(h.fake);
        h.client = s.client;
      });
      after(async () => {
        s?.client.close();
        await s?.server.close();
        s?.cleanup?.();
      });
      tests(h);
    });
  }
}
