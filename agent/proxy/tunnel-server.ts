// The agent's tunnel: how coordinators reach HTTP servers inside this agent's
// containers. A `CONNECT {containerId}:{port}` over mutual TLS (a client
// certificate from the cluster CA, as for the gRPC API) becomes a TCP
// connection from the host to the container's address; only exposed ports
// of this agent's running containers are reachable (the nftables inbound set
// lets the host, and nobody else, open exactly those).

import type { IncomingMessage, ServerResponse } from "node:http";
import { STATUS_CODES } from "node:http";
import { type Server, createServer } from "node:https";
import { isIP, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import type { TLSSocket } from "node:tls";
import { BerthError, type ErrorCode, describeError } from "../../shared/errors.ts";
import { connectAttempt } from "../../shared/net.ts";
import type { ContainerState } from "../../api/index.ts";
import {
  ERROR_CODE_HEADER,
  CONNECT_TIMEOUT_HEADER,
  parseConnectTimeout,
  parseTunnelTarget,
} from "../../api/index.ts";

/** What the tunnel needs to know about a container of this agent. */
export interface TunnelContainer {
  state: ContainerState;
  ipv4?: string;
  exposedPorts: number[];
}

/** The agent's containers as the tunnel sees them; undefined when this agent has no such container. */
export interface TunnelContainers {
  lookup(containerId: string): TunnelContainer | undefined | Promise<TunnelContainer | undefined>;
}

export interface TunnelServerOptions {
  /** Address to listen on, e.g. "0.0.0.0". */
  host: string;
  /** 0 picks a free port (see TunnelServer.port). */
  port: number;
  /** The agent's own certificate and the cluster CA, as for its gRPC server. */
  tls: { caPem: string; certPem: string; keyPem: string };
  containers: TunnelContainers;
  /**
   * Client certificate common names allowed to open tunnels. Any certificate
   * from the cluster CA is accepted when omitted.
   * @default undefined
   */
  allowedClientNames?: string[];
  /** Tunnels open or being dialled at once; more are refused (503). @default 4096 */
  maxTunnels?: number;
  /**
   * Answers plain requests (not CONNECT) from any certificate of the cluster
   * CA, before the tunnel's 405: the layer blobs the agent serves its peers
   * (agent/images/blob-server.ts). Returns false for a request it does not
   * serve.
   */
  requests?: (req: IncomingMessage, res: ServerResponse) => boolean;
  /** Pause between attempts while the container's port refuses connections. @default 50 */
  retryIntervalMs?: number;
  log?: { warn(obj: object, msg?: string): void };
}

interface Tunnel {
  client: Duplex;
  upstream?: Socket;
  abort: AbortController;
}

interface Refusal {
  status: number;
  code: ErrorCode;
  message: string;
}

const refuse = (status: number, code: ErrorCode, message: string): Refusal => ({ status, code, message });

export class TunnelServer {
  private readonly tunnels = new Set<Tunnel>();
  /** Every TCP connection, also those still in the TLS handshake (which close() would wait for). */
  private readonly connections = new Set<Socket>();
  private stopping = false;

  private constructor(
    private readonly server: Server,
    private readonly o: ResolvedTunnelServerOptions,
    /** The bound port. */
    readonly port: number,
  ) {
    server.on("connection", (socket: Socket) => {
      this.connections.add(socket);
      socket.once("close", () => this.connections.delete(socket));
    });
    server.on("connect", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      void this.onConnect(req, socket, head);
    });
  }

  static async start(options: TunnelServerOptions): Promise<TunnelServer> {
    const o = resolveTunnelServerOptions(options);
    const server = createServer({
      ca: o.tls.caPem,
      cert: o.tls.certPem,
      key: o.tls.keyPem,
      requestCert: true,
      rejectUnauthorized: true,
      minVersion: "TLSv1.2",
      // A client may finish sending (FIN) and still read the container's answer.
      allowHalfOpen: true,
      noDelay: true,
      handshakeTimeout: 10_000,
    });
    // A CONNECT arrives right after the handshake; idle or slow clients are dropped.
    server.headersTimeout = 10_000;
    server.requestTimeout = 15_000;
    server.on("request", (req, res) => {
      if (o.requests?.(req, res)) return;
      res.writeHead(405, {
        "content-type": "text/plain; charset=utf-8",
        [ERROR_CODE_HEADER]: "invalid_request",
      });
      res.end("the agent tunnel accepts only CONNECT {containerId}:{port}\n");
    });
    // Clients without a cluster certificate fail the handshake; nothing to answer.
    server.on("tlsClientError", () => {});
    const host = o.host;
    const port = await new Promise<number>((resolve, reject) => {
      server.once("error", reject);
      server.listen(o.port, host, () => {
        server.off("error", reject);
        const a = server.address();
        resolve(typeof a === "object" && a ? a.port : o.port);
      });
    }).catch((e: unknown) => {
      throw new BerthError(
        "unavailable",
        `agent tunnel: cannot listen on ${hostPort(host, o.port)}: ${describeError(e)}`,
      );
    });
    return new TunnelServer(server, o, port);
  }

  /** Tunnels open or being dialled now. */
  get openTunnels(): number {
    return this.tunnels.size;
  }

  /** Stops listening and closes every tunnel and pending connection. */
  async stop(): Promise<void> {
    this.stopping = true;
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const t of this.tunnels) destroyTunnel(t);
    this.tunnels.clear();
    for (const s of this.connections) s.destroy();
    await closed;
  }

  private async onConnect(req: IncomingMessage, client: Duplex, head: Buffer): Promise<void> {
    client.on("error", () => client.destroy());
    const refusal = this.admit(req);
    if (refusal) return answer(client, refusal);
    // Tracked from here, so stop() also ends refusals still being written.
    const tunnel: Tunnel = { client, abort: new AbortController() };
    this.tunnels.add(tunnel);
    client.once("close", () => {
      tunnel.abort.abort();
      this.tunnels.delete(tunnel);
    });
    const target = parseTunnelTarget(req.url);
    if (typeof target === "string") return answer(client, refuse(400, "invalid_request", target));
    const timeoutMs = parseConnectTimeout(req.headers[CONNECT_TIMEOUT_HEADER]);
    if (typeof timeoutMs === "string") return answer(client, refuse(400, "invalid_request", timeoutMs));

    let dialled: Socket | Refusal | undefined;
    try {
      dialled = await this.dial(target.containerId, target.port, timeoutMs, tunnel.abort.signal);
    } catch (e) {
      this.o.log?.warn({ err: describeError(e), containerId: target.containerId }, "tunnel lookup failed");
      dialled = refuse(
        502,
        "unavailable",
        `cannot reach container ${target.containerId}: ${describeError(e)}`,
      );
    }
    if (!dialled || client.destroyed || this.stopping) {
      if (dialled && !("status" in dialled)) dialled.destroy();
      client.destroy();
      return;
    }
    if ("status" in dialled) return answer(client, dialled);
    tunnel.upstream = dialled;
    client.write("HTTP/1.1 200 Connection Established\r\n\r\n");
    if (head.length > 0) dialled.write(head);
    splice(client, dialled);
  }

  /** Refuses when stopping, full, or the client's certificate is not one allowed to tunnel. */
  private admit(req: IncomingMessage): Refusal | undefined {
    if (this.stopping) return refuse(503, "unavailable", "the agent is stopping");
    const names = this.o.allowedClientNames;
    if (names) {
      const cn = (req.socket as TLSSocket).getPeerCertificate?.()?.subject?.CN;
      if (typeof cn !== "string" || !names.has(cn)) {
        return refuse(403, "permission_denied", `client certificate ${cn ?? "(no CN)"} may not open tunnels`);
      }
    }
    if (this.tunnels.size >= this.o.maxTunnels) {
      return refuse(503, "resource_exhausted", `this agent has ${this.o.maxTunnels} tunnels open, its limit`);
    }
    return undefined;
  }

  /**
   * Connects to the container port, retrying while it refuses (the server in
   * the container is still starting) until the deadline or the container stops.
   * Undefined when the client went away or the server is stopping.
   */
  private async dial(
    id: string,
    port: number,
    timeoutMs: number,
    signal: AbortSignal,
  ): Promise<Socket | Refusal | undefined> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const c = await this.o.containers.lookup(id);
      if (signal.aborted) return undefined;
      if (!c) return refuse(404, "not_found", `container ${id} is not on this agent`);
      if (!c.exposedPorts.includes(port)) {
        const exposed =
          c.exposedPorts.length > 0 ? `exposed: ${c.exposedPorts.join(", ")}` : "it exposes none";
        return refuse(
          403,
          "failed_precondition",
          `port ${port} of container ${id} is not exposed (${exposed})`,
        );
      }
      if (c.state === "stopped") return refuse(409, "failed_precondition", `container ${id} is not running`);
      if (c.state === "running") {
        if (!c.ipv4) return refuse(502, "unavailable", `container ${id} has no IPv4 address`);
        const r = await connectAttempt(c.ipv4, port, deadline - Date.now(), signal, { allowHalfOpen: true });
        if (signal.aborted) {
          if (r instanceof Error || r === "timeout") return undefined;
          r.destroy();
          return undefined;
        }
        if (!(r instanceof Error) && r !== "timeout") return r;
        if (r instanceof Error && (r as NodeJS.ErrnoException).code !== "ECONNREFUSED") {
          return refuse(
            502,
            "unavailable",
            `cannot connect to port ${port} of container ${id}: ${r.message}`,
          );
        }
      }
      const left = deadline - Date.now();
      if (left <= 0) {
        const what = c.state === "running" ? "was not listening" : "did not start";
        return refuse(504, "unavailable", `port ${port} of container ${id} ${what} within ${timeoutMs} ms`);
      }
      try {
        await sleep(Math.min(this.o.retryIntervalMs, left), undefined, { signal });
      } catch {
        return undefined;
      }
    }
  }
}

export type ResolvedTunnelServerOptions = Required<
  Omit<TunnelServerOptions, "allowedClientNames" | "log" | "requests">
> & {
  allowedClientNames?: Set<string>;
  log?: TunnelServerOptions["log"];
  requests?: TunnelServerOptions["requests"];
};

export function resolveTunnelServerOptions(o: TunnelServerOptions): ResolvedTunnelServerOptions {
  if (typeof o.host !== "string" || o.host === "") {
    throw new BerthError("invalid_request", "agent tunnel: host must be a host name or IP address");
  }
  if (!Number.isInteger(o.port) || o.port < 0 || o.port > 65535) {
    throw new BerthError("invalid_request", `agent tunnel: port must be 0..65535, got ${o.port}`);
  }
  for (const k of ["caPem", "certPem", "keyPem"] as const) {
    if (typeof o.tls?.[k] !== "string" || !o.tls[k].includes("-----BEGIN ")) {
      throw new BerthError("invalid_request", `agent tunnel: tls.${k} is not PEM`);
    }
  }
  const maxTunnels = o.maxTunnels ?? 4096;
  const retryIntervalMs = o.retryIntervalMs ?? 50;
  if (!Number.isInteger(maxTunnels) || maxTunnels < 1) {
    throw new BerthError("invalid_request", `agent tunnel: maxTunnels must be 1 or more, got ${maxTunnels}`);
  }
  if (!Number.isInteger(retryIntervalMs) || retryIntervalMs < 1) {
    throw new BerthError(
      "invalid_request",
      `agent tunnel: retryIntervalMs must be 1 or more, got ${retryIntervalMs}`,
    );
  }
  return {
    host: o.host,
    port: o.port,
    tls: o.tls,
    containers: o.containers,
    maxTunnels,
    retryIntervalMs,
    ...(o.allowedClientNames ? { allowedClientNames: new Set(o.allowedClientNames) } : {}),
    ...(o.log ? { log: o.log } : {}),
    ...(o.requests ? { requests: o.requests } : {}),
  };
}

/**
 * Pipes both ways. A FIN is passed on (half-close); an error or an abrupt
 * close of either side destroys both.
 */
function splice(a: Duplex, b: Socket): void {
  b.setNoDelay(true);
  const kill = () => {
    a.destroy();
    b.destroy();
  };
  a.on("error", kill);
  b.on("error", kill);
  const closedEarly = (s: Duplex) => !(s.readableEnded && s.writableFinished);
  a.once("close", () => closedEarly(a) && b.destroy());
  b.once("close", () => closedEarly(b) && a.destroy());
  a.pipe(b);
  b.pipe(a);
}

function answer(socket: Duplex, r: Refusal): void {
  if (socket.destroyed) return;
  // The client reads the answer and hangs up; one that does not is cut off.
  setTimeout(() => socket.destroy(), 5_000).unref();
  const body = `${r.message.replace(/[\r\n]+/g, " ")}\n`;
  socket.end(
    `HTTP/1.1 ${r.status} ${STATUS_CODES[r.status] ?? "Error"}\r\n` +
      "Content-Type: text/plain; charset=utf-8\r\n" +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      `${ERROR_CODE_HEADER}: ${r.code}\r\n` +
      "Connection: close\r\n\r\n" +
      body,
  );
}

function destroyTunnel(t: Tunnel): void {
  t.abort.abort();
  t.upstream?.destroy();
  t.client.destroy();
}

const hostPort = (host: string, port: number) => (isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`);
