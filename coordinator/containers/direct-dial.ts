// The same-host shortcut of ContainerTunnels: a coordinator on the agent's
// host connects to the container's address on the agent's bridge itself, the
// host → container path the agent's tunnel takes (its nftables rules let the
// host reach exposed ports). No TLS on either end, no CONNECT.

import type { Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { BerthError, describeError } from "../../shared/errors.ts";
import { connectAttempt } from "../../shared/net.ts";

export interface DirectDialTarget {
  containerId: string;
  /** The container's IPv4 on the agent's bridge. */
  ipv4: string;
  port: number;
}

export interface DirectDialOptions {
  timeoutMs: number;
  signal?: AbortSignal;
  /** Pause between attempts while the port refuses connections. @default 50 */
  retryIntervalMs?: number;
}

/**
 * Connects to the container port, retrying refused connections (its server is
 * still starting) until the deadline, as the agent's tunnel does. The errors
 * match the tunnel's: unavailable when nothing listened in time or another
 * connect error; the signal's reason when the caller gave up.
 */
export async function dialDirect(t: DirectDialTarget, o: DirectDialOptions): Promise<Socket> {
  const retryIntervalMs = o.retryIntervalMs ?? 50;
  const deadline = Date.now() + o.timeoutMs;
  for (;;) {
    o.signal?.throwIfAborted();
    const r = await connectAttempt(t.ipv4, t.port, deadline - Date.now(), o.signal);
    if (!(r instanceof Error) && r !== "timeout") {
      r.setNoDelay(true);
      return r;
    }
    o.signal?.throwIfAborted();
    if (r instanceof Error && (r as NodeJS.ErrnoException).code !== "ECONNREFUSED") {
      throw new BerthError(
        "unavailable",
        `cannot connect to port ${t.port} of container ${t.containerId} at ${t.ipv4}: ${describeError(r)}`,
      );
    }
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new BerthError(
        "unavailable",
        `port ${t.port} of container ${t.containerId} was not listening within ${o.timeoutMs} ms`,
      );
    }
    await sleep(Math.min(retryIntervalMs, left), undefined, o.signal ? { signal: o.signal } : {}).catch(() =>
      o.signal?.throwIfAborted(),
    );
  }
}
