// A loopback HTTP load balancer for tests of several coordinators: each
// request goes to the next backend in turn; a backend that refuses the
// connection (a dead coordinator) is skipped, as a balancer's health check
// would, and the request goes to the next. Responses stream through (NDJSON,
// SSE). Counts the requests each backend answered.

import { createServer, request as httpRequest, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";

export interface RoundRobin {
  url: string;
  /** Requests each backend answered, by backend URL. */
  served: Map<string, number>;
  /** Requests sent to a backend whose answer has not ended yet (which coordinator holds a long request). */
  inFlight: Set<{ backend: string; method: string; path: string }>;
  close(): Promise<void>;
}

export async function startRoundRobin(backends: string[]): Promise<RoundRobin> {
  let next = 0;
  const served = new Map(backends.map((b) => [b, 0]));
  const inFlight: RoundRobin["inFlight"] = new Set();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const attempt = (left: number) => {
        const backend = backends[next++ % backends.length] as string;
        const b = new URL(backend);
        const headers: IncomingHttpHeaders = { ...req.headers, host: b.host };
        const flight = { backend, method: req.method ?? "", path: req.url ?? "" };
        inFlight.add(flight);
        res.once("close", () => inFlight.delete(flight));
        const out = httpRequest(
          { host: b.hostname, port: b.port, method: req.method, path: req.url, headers },
          (r) => {
            served.set(backend, (served.get(backend) ?? 0) + 1);
            res.writeHead(r.statusCode ?? 502, r.headers);
            r.pipe(res);
            r.on("error", () => res.destroy());
          },
        );
        out.on("error", (e) => {
          // Refused: the request never reached that backend, so another may take it.
          inFlight.delete(flight);
          if ((e as NodeJS.ErrnoException).code === "ECONNREFUSED" && left > 1) attempt(left - 1);
          else res.destroy();
        });
        out.end(body);
      };
      attempt(backends.length);
    });
  });
  guardClientErrors(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    served,
    inFlight,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

// A client that goes away mid-response must not take the test process down.
function guardClientErrors(server: ReturnType<typeof createServer>): void {
  server.on("clientError", (_e, socket) => socket.destroy());
}
