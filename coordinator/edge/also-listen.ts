// A second listener for the coordinator's one app: `berth up --advertise
// ADDR` keeps the API on loopback over plain HTTP (the local CLI, SDK and
// agent) and also serves it on ADDR over HTTPS, with a certificate of the
// cluster CA, for the hosts that join (docs/install.md, "Joining more
// hosts"). Its requests and upgrades go to the first server's own listeners,
// so both serve the same routes, raw routes and websockets alike, and the
// client's address stays the real one (the audit trail's client_ip).

import type { Server } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { TlsCredentials } from "./app.ts";

export interface AlsoListening {
  port: number;
  close(): Promise<void>;
}

export async function listenAlso(
  main: Server,
  at: { host: string; port: number; tls: TlsCredentials },
): Promise<AlsoListening> {
  const server = createHttpsServer({ cert: at.tls.cert, key: at.tls.key }, (req, res) => {
    main.emit("request", req, res);
  });
  server.keepAliveTimeout = main.keepAliveTimeout;
  server.on("upgrade", (req, socket, head) => main.emit("upgrade", req, socket, head));
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(at.port, at.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address();
  return {
    port: typeof addr === "object" && addr ? addr.port : at.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
