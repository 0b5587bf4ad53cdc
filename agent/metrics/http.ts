import { createServer, type Server } from "node:http";
import type { AgentMetricsRegistry } from "./registry.ts";

// The agent's /metrics for Prometheus: a plain node:http server, since the
// agent has no HTTP stack of its own (its API is gRPC). Only GET /metrics.

export interface MetricsServer {
  port: number;
  close(): Promise<void>;
}

export async function startMetricsServer(o: {
  host: string;
  port: number;
  registry: AgentMetricsRegistry;
}): Promise<MetricsServer> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (path !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("only /metrics is served here\n");
      return;
    }
    if (req.method !== "GET" && req.method !== "HEAD") {
      res.writeHead(405, { allow: "GET, HEAD", "content-type": "text/plain" }).end("use GET\n");
      return;
    }
    o.registry.render().then(
      ({ contentType, body }) => res.writeHead(200, { "content-type": contentType }).end(body),
      (e: unknown) =>
        res.writeHead(500, { "content-type": "text/plain" }).end(`cannot render metrics: ${(e as Error).message}\n`),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, o.host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const addr = server.address();
  return {
    port: typeof addr === "object" && addr ? addr.port : o.port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
