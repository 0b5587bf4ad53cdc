// The cluster a coordinator joins before it serves anything: its
// foundations (TLS, secrets key, store, NATS and streams; startup.ts), the
// cluster PKI, an empty store's first tokens, and everything that reaches
// the agents: the fleet view and its watcher, joins and revocations, the
// agents' gRPC clients and the tunnels to their containers. Each part is a
// step of the coordinator's lifecycle (lifecycle.ts), in this order.

import type { Logger } from "pino";
import { readHostId } from "../shared/host-id.ts";
import { closeNats, jetStreamReady } from "../shared/nats-server.ts";
import { bootstrapEmptyStore } from "./bootstrap.ts";
import { AgentClientPool, ContainerAddresses, ContainerTunnels } from "./containers/index.ts";
import {
  AgentNatsUsers,
  AgentRevoker,
  FleetView,
  FleetWatcher,
  fleetHttpRoutes,
  JoinService,
  RevokedAgents,
} from "./fleet/index.ts";
import type { Lifecycle } from "./lifecycle.ts";
import type { ResolvedCoordinatorOptions } from "./options.ts";
import { ClusterPki } from "./pki/index.ts";
import { openFoundations } from "./startup.ts";

export async function openCluster(o: ResolvedCoordinatorOptions, log: Logger, step: Lifecycle["step"]) {
  const { tls, secretKey, store, nc } = await step(
    "foundations",
    () => openFoundations(o, log),
    async (f) => {
      await closeNats(f.nc);
      await f.store.close();
    },
  );
  const pki = await step("cluster PKI", () => ClusterPki.load(store.kv));
  await step("bootstrap", () => bootstrapEmptyStore(store, o.bootstrap, log));

  const fleet = new FleetView();
  const revoked = await step("revoked agents", () => new RevokedAgents(store.kv).load());
  const natsUsers = o.agentNatsUsers ? new AgentNatsUsers({ kv: store.kv, ...o.agentNatsUsers }) : undefined;
  // Brings users.conf up to the store (agents joined or revoked while this coordinator was down).
  await step("agent users", async () => {
    if (natsUsers && (await natsUsers.sync())) await jetStreamReady(nc);
  });
  await step(
    "fleet watcher",
    () => {
      const watcher = new FleetWatcher(nc, fleet, store.agents, log.child({ area: "fleet" }), revoked);
      watcher.start();
      return watcher;
    },
    (w) => w.stop(),
  );
  const join = new JoinService({
    joinTokens: store.joinTokens,
    agents: store.agents,
    pki,
    agentNats: o.agentNats,
    ...(natsUsers ? { natsUsers } : {}),
    revoked,
    heartbeatIntervalMs: o.heartbeatIntervalMs,
    ...(o.registry ? { registry: o.registry } : {}),
  });
  const agentClients = await step(
    "agent clients",
    () => AgentClientPool.create({ fleet, pki, revoked }),
    (c) => c.close(),
  );
  const revoker = await step(
    "agent revoker",
    () => {
      const revoker = new AgentRevoker({
        agents: store.agents,
        revoked,
        ...(natsUsers ? { natsUsers } : {}),
        fleet,
        clients: agentClients,
        nc,
        log: log.child({ area: "fleet" }),
      });
      revoker.start();
      return revoker;
    },
    (r) => r.stop(),
  );
  // On an agent's own host, its containers are dialled at their address rather than through its tunnel.
  const tunnels = await step(
    "container tunnels",
    () =>
      ContainerTunnels.create({
        fleet,
        pki,
        localHostId: readHostId(o.dataDir),
        addresses: new ContainerAddresses({ agents: agentClients }),
      }),
    (t) => t.close(),
  );
  const routes = fleetHttpRoutes({ store, view: fleet, join, revoker });
  return { tls, secretKey, store, nc, fleet, join, revoker, agentClients, tunnels, fleetRoutes: routes };
}
