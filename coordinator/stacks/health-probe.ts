// `GET /.berth/health` of a direct-served container (endpoint, asgi,
// realtime), through its agent's tunnel: what a stack asks to know whether a
// member's new version is ready. berth.runtime.http_runner answers it
// itself, never the user's app: 200 once the handler imported (and on_start
// ran), 500 with the load error when it did not (a handler that does not load
// still serves, every request failing). Until the server listens the
// connection fails: not ready yet.

import { request } from "node:http";
import type { TunnelDialer } from "../containers/index.ts";
import { RUNNER_HTTP_PORT } from "../endpoints/index.ts";

export const HEALTH_PATH = "/.berth/health";
const PROBE_TIMEOUT_MS = 5000;

export type HealthAnswer = { healthy: true } | { healthy: false; error: string } | undefined;

/** Asks the container; undefined when it does not answer (yet). */
export function healthProbe(
  tunnels: Pick<TunnelDialer, "httpAgent">,
): (c: { agentId: string; containerId: string }) => Promise<HealthAnswer> {
  return (c) =>
    new Promise((resolve) => {
      const req = request(
        {
          agent: tunnels.httpAgent(c.agentId, c.containerId, RUNNER_HTTP_PORT),
          // The tunnel's agent makes the connection; the name only keys its pool.
          host: c.containerId,
          port: RUNNER_HTTP_PORT,
          method: "GET",
          path: HEALTH_PATH,
          timeout: PROBE_TIMEOUT_MS,
        },
        (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (d: string) => {
            if (body.length < 64 * 1024) body += d;
          });
          res.on("end", () => resolve(answerOf(res.statusCode ?? 0, body)));
          res.on("error", () => resolve(undefined));
        },
      );
      req.on("timeout", () => req.destroy());
      req.on("error", () => resolve(undefined));
      req.end();
    });
}

/** 200: healthy; the runner's 500 with its load error: failed; anything else: no answer yet. */
function answerOf(status: number, body: string): HealthAnswer {
  if (status === 200) return { healthy: true };
  if (status !== 500) return undefined;
  try {
    const e = (JSON.parse(body) as { error?: { message?: unknown } }).error;
    if (typeof e?.message === "string") return { healthy: false, error: e.message };
  } catch {
    // Not the runner's JSON: not its answer.
  }
  return undefined;
}
