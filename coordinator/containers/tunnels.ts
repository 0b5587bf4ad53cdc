// Connections from the coordinator to ports of containers, through the
// tunnel of the agent that runs them (agent/proxy/): mutual TLS with the
// coordinator's client certificate, the agent verified by its id (agents are
// dialled by address but named by id), then `CONNECT {containerId}:{port}`.
// Each container port gets a keep-alive http.Agent whose sockets are tunnels,
// so requests to a warm container skip the TLS handshake and the CONNECT.
// A coordinator on the agent's own host (same host id) skips the tunnel and
// connects to the container's address itself (direct-dial.ts).

import { Agent, type AgentOptions, type ClientRequest, type ClientRequestArgs } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { type TLSSocket, checkServerIdentity, connect as tlsConnect } from "node:tls";
import {
  CONNECT_TIMEOUT_HEADER,
  DEFAULT_CONNECT_TIMEOUT_MS,
  ERROR_CODE_HEADER,
  MAX_CONNECT_TIMEOUT_MS,
  tunnelError,
} from "../../api/index.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import type { Heartbeat } from "../../shared/fleet.ts";
import { MaskedError } from "../http/index.ts";
import { dialDirect } from "./direct-dial.ts";

/** What the endpoint router needs: a fake of it is enough to test the router. */
export interface TunnelDialer {
  /** A socket to `port` of `containerId` on `agentId`, through that agent's tunnel. */
  connect(
    agentId: string,
    containerId: string,
    port: number,
    o?: { timeoutMs?: number; signal?: AbortSignal },
  ): Promise<Duplex>;
  /** A keep-alive http.Agent whose connections are tunnels to that container port (cached until forget()). */
  httpAgent(agentId: string, containerId: string, port: number): Agent;
  /** Destroys the container's agents and sockets (it stopped or moved). */
  forget(containerId: string): void;
}

export interface ContainerTunnelsOptions {
  /** Where agents' tunnels listen: their latest heartbeat's proxyAddress. */
  fleet: { get(agentId: string): { heartbeat: Pick<Heartbeat, "proxyAddress" | "hostId"> } | undefined };
  /** The cluster CA and the coordinator's client certificate. */
  tls: { caPem: string; certPem: string; keyPem: string };
  /** Sockets per container port. @default 256 */
  maxSockets?: number;
  /** Idle sockets kept per container port. @default 32 */
  maxFreeSockets?: number;
  /**
   * An idle socket is closed after this long. Shorter than the container
   * server's own keep-alive timeout, so a request is never sent on a
   * connection the server is closing. @default 4000
   */
  idleSocketTimeoutMs?: number;
  /** TLS handshake and CONNECT answer, on top of the connect timeout. @default 10000 */
  handshakeTimeoutMs?: number;
  /**
   * This machine's id (shared/host-id.ts). Containers of an agent whose
   * heartbeat reports the same id are dialled directly at their address from
   * `addresses`, never through the tunnel. @default none: always the tunnel
   */
  localHostId?: string;
  /** Containers' IPv4 addresses (ContainerAddresses), for the same-host shortcut. */
  addresses?: ContainerAddressSource;
  /** Pause between direct attempts while a port refuses connections. @default 50 */
  retryIntervalMs?: number;
}

export interface ContainerAddressSource {
  /** The container's IPv4 on its agent's bridge when `port` is exposed; undefined when unknown (the tunnel is taken). */
  lookup(agentId: string, containerId: string, port: number): Promise<string | undefined>;
  forget(containerId: string): void;
}

export interface ContainerTunnelsCreateOptions extends Omit<ContainerTunnelsOptions, "tls"> {
  /** The cluster PKI (ClusterPki). */
  pki: { caPem: string; issueCoordinatorClientCert(): Promise<{ certPem: string; keyPem: string }> };
}

/** Longest CONNECT answer head read; the agent's are a few hundred bytes. */
const MAX_ANSWER_BYTES = 16 * 1024;

export class ContainerTunnels implements TunnelDialer {
  private readonly agents = new Map<string, Map<number, TunnelHttpAgent>>();
  private readonly sockets = new Map<string, Set<Duplex>>();
  private readonly o: Required<Omit<ContainerTunnelsOptions, "fleet" | "tls" | "localHostId" | "addresses">>;

  constructor(private readonly options: ContainerTunnelsOptions) {
    this.o = {
      maxSockets: options.maxSockets ?? 256,
      maxFreeSockets: options.maxFreeSockets ?? 32,
      idleSocketTimeoutMs: options.idleSocketTimeoutMs ?? 4000,
      handshakeTimeoutMs: options.handshakeTimeoutMs ?? 10_000,
      retryIntervalMs: options.retryIntervalMs ?? 50,
    };
  }

  /** Issues the coordinator's client certificate once for every tunnel. */
  static async create(o: ContainerTunnelsCreateOptions): Promise<ContainerTunnels> {
    const { pki, ...rest } = o;
    const cert = await pki.issueCoordinatorClientCert();
    return new ContainerTunnels({ ...rest, tls: { caPem: pki.caPem, ...cert } });
  }

  async connect(
    agentId: string,
    containerId: string,
    port: number,
    o: { timeoutMs?: number; signal?: AbortSignal } = {},
  ): Promise<Duplex> {
    const timeoutMs = o.timeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    if (!Number.isInteger(timeoutMs) || timeoutMs < 0 || timeoutMs > MAX_CONNECT_TIMEOUT_MS) {
      throw new BerthError(
        "invalid_request",
        `tunnel timeoutMs must be 0..${MAX_CONNECT_TIMEOUT_MS}, got ${timeoutMs}`,
      );
    }
    o.signal?.throwIfAborted();
    const ipv4 = await this.sameHostAddress(agentId, containerId, port);
    o.signal?.throwIfAborted();
    const socket = ipv4
      ? await dialDirect(
          { containerId, ipv4, port },
          { timeoutMs, retryIntervalMs: this.o.retryIntervalMs, ...(o.signal ? { signal: o.signal } : {}) },
        )
      : await this.dialTunnel(agentId, containerId, port, timeoutMs, o.signal);
    const own = this.sockets.get(containerId) ?? new Set<Duplex>();
    this.sockets.set(containerId, own);
    own.add(socket);
    socket.once("close", () => {
      own.delete(socket);
      if (own.size === 0 && this.sockets.get(containerId) === own) this.sockets.delete(containerId);
    });
    return socket;
  }

  /** The container's address when its agent runs on this machine and the address is known. */
  private async sameHostAddress(
    agentId: string,
    containerId: string,
    port: number,
  ): Promise<string | undefined> {
    const { localHostId, addresses } = this.options;
    if (!localHostId || !addresses) return undefined;
    if (this.options.fleet.get(agentId)?.heartbeat.hostId !== localHostId) return undefined;
    return addresses.lookup(agentId, containerId, port);
  }

  private async dialTunnel(
    agentId: string,
    containerId: string,
    port: number,
    timeoutMs: number,
    signal: AbortSignal | undefined,
  ): Promise<TLSSocket> {
    const address = this.options.fleet.get(agentId)?.heartbeat.proxyAddress;
    if (!address) throw new BerthError("unavailable", `agent ${agentId} has not reported a tunnel address`);
    const { host, port: agentPort } = splitHostPort(address);
    const socket = tlsConnect({
      host,
      port: agentPort,
      ca: this.options.tls.caPem,
      cert: this.options.tls.certPem,
      key: this.options.tls.keyPem,
      servername: agentId,
      checkServerIdentity: (_host, cert) => checkServerIdentity(agentId, cert),
      minVersion: "TLSv1.2",
    });
    socket.setNoDelay(true);
    const request =
      `CONNECT ${containerId}:${port} HTTP/1.1\r\n` +
      `Host: ${containerId}:${port}\r\n` +
      `${CONNECT_TIMEOUT_HEADER}: ${timeoutMs}\r\n\r\n`;
    socket.write(request);
    try {
      await readAnswer(socket, timeoutMs + this.o.handshakeTimeoutMs, signal, {
        agentId,
        address,
        target: `port ${port} of container ${containerId}`,
      });
    } catch (e) {
      socket.destroy();
      throw e;
    }
    return socket;
  }

  httpAgent(agentId: string, containerId: string, port: number): Agent {
    const byPort = this.agents.get(containerId) ?? new Map<number, TunnelHttpAgent>();
    this.agents.set(containerId, byPort);
    let agent = byPort.get(port);
    if (!agent || agent.agentId !== agentId) {
      agent?.destroy();
      agent = new TunnelHttpAgent(this, agentId, containerId, port, this.o);
      byPort.set(port, agent);
    }
    return agent;
  }

  forget(containerId: string): void {
    for (const agent of this.agents.get(containerId)?.values() ?? []) agent.destroy();
    this.agents.delete(containerId);
    for (const s of this.sockets.get(containerId) ?? []) s.destroy();
    this.sockets.delete(containerId);
    this.options.addresses?.forget(containerId);
  }

  close(): void {
    for (const id of new Set([...this.agents.keys(), ...this.sockets.keys()])) this.forget(id);
  }
}

/** An http.Agent whose every connection reaches one container port (a tunnel, or direct on the same host). */
class TunnelHttpAgent extends Agent {
  constructor(
    private readonly tunnels: ContainerTunnels,
    readonly agentId: string,
    private readonly containerId: string,
    private readonly port: number,
    private readonly o: { maxSockets: number; maxFreeSockets: number; idleSocketTimeoutMs: number },
  ) {
    super({
      keepAlive: true,
      maxSockets: o.maxSockets,
      maxFreeSockets: o.maxFreeSockets,
      scheduling: "lifo",
    } satisfies AgentOptions);
  }

  override createConnection(
    options: ClientRequestArgs,
    callback?: (err: Error | null, stream: Duplex) => void,
  ): Duplex | null | undefined {
    const signal = (options as { signal?: AbortSignal }).signal;
    this.tunnels.connect(this.agentId, this.containerId, this.port, signal ? { signal } : {}).then(
      (socket) => callback?.(null, socket),
      (err: Error) => callback?.(err, undefined as unknown as Duplex),
    );
    // Node's Agent waits for the callback when nothing is returned.
    return undefined;
  }

  // An idle socket times out (the Agent destroys free sockets on 'timeout');
  // one in use does not.
  override keepSocketAlive(socket: Duplex): boolean {
    const keep = (Agent.prototype.keepSocketAlive as (s: Duplex) => boolean).call(this, socket);
    (socket as Socket).setTimeout(this.o.idleSocketTimeoutMs);
    return keep;
  }

  override reuseSocket(socket: Duplex, request: ClientRequest): void {
    (socket as Socket).setTimeout(0);
    super.reuseSocket(socket, request);
  }
}

/** Reads the agent's answer to CONNECT; resolves on 200 with any early bytes put back. */
function readAnswer(
  socket: TLSSocket,
  timeoutMs: number,
  signal: AbortSignal | undefined,
  what: { agentId: string; address: string; target: string },
): Promise<void> {
  return new Promise((resolve, reject) => {
    let buf = Buffer.alloc(0);
    let head: { status: number; code?: string; length: number; bodyStart: number } | undefined;
    const finish = (err?: Error, rest?: Buffer) => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      socket.off("data", onData);
      socket.off("error", onError);
      socket.off("end", onEnd);
      if (err) return reject(err);
      if (rest && rest.length > 0) socket.unshift(rest);
      resolve();
    };
    // The agent's address is the cluster's, not the client's: the log has it, a client only an error id.
    const unreachable = (why: string) =>
      new MaskedError(
        "unavailable",
        `cannot reach agent ${what.agentId}'s tunnel at ${what.address}: ${why}`,
        {
          about: `agent ${what.agentId}'s tunnel`,
        },
      );
    const refused = (body: Buffer) => {
      const h = head as NonNullable<typeof head>;
      const message = body.toString("utf8").trim() || `the agent answered ${h.status}`;
      return tunnelError(h.status, h.code, `agent ${what.agentId}: ${message}`);
    };
    const onData = (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      if (!head) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) {
          if (buf.length > MAX_ANSWER_BYTES) finish(unreachable("its answer to CONNECT is not HTTP"));
          return;
        }
        const parsed = parseHead(buf.subarray(0, end).toString("latin1"));
        if (!parsed) return finish(unreachable("its answer to CONNECT is not HTTP"));
        head = { ...parsed, bodyStart: end + 4 };
        if (head.status === 200) return finish(undefined, buf.subarray(head.bodyStart));
      }
      if (buf.length - head.bodyStart >= Math.min(head.length, MAX_ANSWER_BYTES)) {
        finish(refused(buf.subarray(head.bodyStart, head.bodyStart + head.length)));
      }
    };
    const onEnd = () =>
      finish(head ? refused(buf.subarray(head.bodyStart)) : unreachable("it closed the connection"));
    const onError = (e: Error) =>
      finish(head ? refused(buf.subarray(head.bodyStart)) : unreachable(describeError(e)));
    const onAbort = () => finish(signal?.reason instanceof Error ? signal.reason : new Error("aborted"));
    const timer = setTimeout(
      () => finish(unreachable(`no answer to CONNECT ${what.target} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    socket.on("data", onData);
    socket.on("error", onError);
    socket.on("end", onEnd);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function parseHead(text: string): { status: number; code?: string; length: number } | undefined {
  const [statusLine, ...lines] = text.split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})(?: |$)/.exec(statusLine ?? "");
  if (!m) return undefined;
  const headers = new Map<string, string>();
  for (const line of lines) {
    const colon = line.indexOf(":");
    if (colon > 0) headers.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  const length = Number(headers.get("content-length") ?? MAX_ANSWER_BYTES);
  const code = headers.get(ERROR_CODE_HEADER);
  return {
    status: Number(m[1]),
    length: Number.isInteger(length) && length >= 0 ? length : MAX_ANSWER_BYTES,
    ...(code ? { code } : {}),
  };
}

function splitHostPort(address: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(address) ?? /^([^:]+):(\d+)$/.exec(address);
  const port = m ? Number(m[2]) : Number.NaN;
  if (!m || !(port >= 1 && port <= 65535)) {
    throw new MaskedError(
      "unavailable",
      `the agent's tunnel address ${JSON.stringify(address)} is not host:port`,
    );
  }
  return { host: m[1] as string, port };
}
