// What the coordinator opens before it builds any service: its TLS
// certificate, the secrets key, the store, NATS and the JetStream streams.
// Each failure is a StartupError naming what could not be opened, and what
// was opened before it is closed again.

import { connect, type NatsConnection } from "nats";
import type { Logger } from "pino";
import { describeError } from "../shared/errors.ts";
import { closeNats } from "../shared/nats-server.ts";
import { ensureStreams } from "./fleet/index.ts";
import { loadTlsCredentials, type ResolvedCoordinatorOptions } from "./options.ts";
import { SECRET_KEY_ENV, type SecretKey, loadSecretKey } from "./secrets/index.ts";
import { Store } from "./records.ts";
import { streamReplicas } from "./streams/index.ts";

/** A start-up failure the operator can act on, printed as one line. */
export class StartupError extends Error {}

export interface Foundations {
  tls: ReturnType<typeof loadTlsCredentials> | undefined;
  secretKey: SecretKey;
  store: Store;
  nc: NatsConnection;
}

export async function openFoundations(o: ResolvedCoordinatorOptions, log: Logger): Promise<Foundations> {
  let tls: ReturnType<typeof loadTlsCredentials> | undefined;
  try {
    tls = o.tls ? loadTlsCredentials(o.tls) : undefined;
  } catch (e) {
    throw new StartupError(`cannot load the TLS certificate: ${describeError(e)}`);
  }
  let secretKey: SecretKey;
  try {
    secretKey = loadSecretKey({ file: o.secretsKeyFile, fromEnv: process.env[SECRET_KEY_ENV] });
  } catch (e) {
    throw new StartupError(`cannot load the secrets key: ${describeError(e)}`);
  }
  let store: Store;
  try {
    store = await Store.open(o.store);
  } catch (e) {
    throw new StartupError(`cannot open the store: ${describeError(e)}`);
  }
  let nc: NatsConnection;
  try {
    nc = await connect({
      // A cluster's nodes, comma-separated (docs/install.md, "Highly available control plane").
      servers: o.nats.url.split(","),
      ...(o.nats.user ? { user: o.nats.user, pass: o.nats.password ?? "" } : {}),
      ...(o.nats.caFile ? { tls: { caFile: o.nats.caFile } } : {}),
      name: "berth-coordinator",
      // Every JetStream publish is a request: no stack captured per request (two Errors each) on the task path.
      noAsyncTraces: true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 1000,
      timeout: 5000,
    });
  } catch (e) {
    await store.close();
    throw new StartupError(`cannot connect to NATS at ${o.nats.url}: ${describeError(e)}`);
  }
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect" || s.type === "reconnect") log.warn({ nats: s.type }, `NATS ${s.type}`);
    }
  })();

  try {
    await ensureStreams(await nc.jetstreamManager(), o.streams, streamReplicas(nc));
  } catch (e) {
    await closeNats(nc);
    await store.close();
    throw new StartupError(
      `cannot set up JetStream streams on ${o.nats.url} (is JetStream enabled?): ${describeError(e)}`,
    );
  }

  return { tls, secretKey, store, nc };
}
