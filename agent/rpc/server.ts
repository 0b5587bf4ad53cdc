// Serves the Agent service on a local unix socket (root on the host is the
// authentication there) and on TCP with mutual TLS: a client certificate
// signed by the cluster CA is required. Each listener is its own grpc.Server
// so the TLS authorization rules can never leak onto the other.

import { isIP } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import type { AgentApi } from "../../api/index.ts";
import type { ContainerApi } from "../../api/index.ts";
import { buildHandlers, buildsOf } from "./build-handlers.ts";
import { type Authorize, containerHandlers, unary } from "./container-handlers.ts";
import { capacityToProto, healthToProto } from "../../api/grpc/index.ts";
import { loadAgentProto } from "../../api/grpc/index.ts";
import { isSandboxApi, type SandboxApi, sandboxHandlers } from "./sandbox-handlers.ts";
import { isProcessApi, processHandlers } from "./process-handlers.ts";
import { ProcessChannels } from "./process-channel.ts";
import type { SandboxProcessApi } from "../../api/index.ts";
import { bindUnixSocket, resolveUnixSocketPath } from "./unix-socket.ts";

export interface AgentRpcTlsOptions {
  /** The cluster CA; client certificates must chain to it. */
  caPem: string;
  /** This agent's server certificate and key, issued by the cluster CA. */
  certPem: string;
  keyPem: string;
}

export interface AgentRpcTcpOptions {
  /** Address to listen on, e.g. "0.0.0.0" or "::". */
  host: string;
  /** 0 picks a free port (see AgentRpcServer.tcpPort). */
  port: number;
  tls: AgentRpcTlsOptions;
  /**
   * Client certificate common names allowed to call. Any certificate from
   * the cluster CA is accepted when omitted.
   * @default undefined
   */
  allowedClientNames?: string[];
}

export interface AgentRpcServerOptions {
  impl: AgentApi;
  /**
   * The container half of the API. Without it the container RPCs answer
   * UNIMPLEMENTED (BerthError not_implemented).
   * @default undefined
   */
  containers?: ContainerApi;
  /**
   * Files and snapshots (sandbox-api.ts). Without it the sandbox RPCs answer
   * UNIMPLEMENTED.
   * @default `containers`, when it implements them too (ContainerHost does)
   */
  sandboxes?: SandboxApi;
  /**
   * Sandbox processes (api/processes.ts). Without it the process RPCs answer UNIMPLEMENTED.
   * @default `containers`, when it keeps them too (ContainerHost does)
   */
  processes?: SandboxProcessApi;
  /** Absolute path of the local socket; created with mode 0600. */
  unixSocket?: string;
  tcp?: AgentRpcTcpOptions;
}

export interface ResolvedAgentRpcServerOptions {
  impl: AgentApi;
  containers?: ContainerApi;
  sandboxes?: SandboxApi;
  processes?: SandboxProcessApi;
  unixSocket?: string;
  tcp?: Required<Omit<AgentRpcTcpOptions, "allowedClientNames">> & { allowedClientNames?: Set<string> };
}

export interface AgentRpcServer {
  /** The bound TCP port, when serving TCP. */
  tcpPort?: number;
  unixSocket?: string;
  close(): Promise<void>;
}

function requirePem(pem: string | undefined, kind: "CERTIFICATE" | "PRIVATE KEY", field: string): string {
  if (typeof pem !== "string" || !pem.includes("-----BEGIN ") || !pem.includes(kind)) {
    throw new BerthError("invalid_request", `agent rpc: tcp.tls.${field} is not a PEM ${kind.toLowerCase()}`);
  }
  return pem;
}

export function resolveAgentRpcServerOptions(o: AgentRpcServerOptions): ResolvedAgentRpcServerOptions {
  if (!o.impl) throw new BerthError("invalid_request", "agent rpc: impl is required");
  if (!o.unixSocket && !o.tcp) {
    throw new BerthError("invalid_request", "agent rpc: give a unixSocket path, a tcp listener, or both");
  }
  const resolved: ResolvedAgentRpcServerOptions = { impl: o.impl };
  if (o.containers) resolved.containers = o.containers;
  const sandboxes = o.sandboxes ?? (isSandboxApi(o.containers) ? o.containers : undefined);
  if (sandboxes) resolved.sandboxes = sandboxes;
  const processes = o.processes ?? (isProcessApi(o.containers) ? o.containers : undefined);
  if (processes) resolved.processes = processes;
  if (o.unixSocket !== undefined) resolved.unixSocket = resolveUnixSocketPath(o.unixSocket);
  if (o.tcp) {
    const { host, port, tls } = o.tcp;
    if (typeof host !== "string" || host === "") {
      throw new BerthError("invalid_request", "agent rpc: tcp.host must be a host name or IP address");
    }
    if (!Number.isInteger(port) || port < 0 || port > 65535) {
      throw new BerthError("invalid_request", `agent rpc: tcp.port must be 0..65535, got ${port}`);
    }
    if (!tls)
      throw new BerthError("invalid_request", "agent rpc: tcp.tls is required (the TCP API is mTLS only)");
    resolved.tcp = {
      host,
      port,
      tls: {
        caPem: requirePem(tls.caPem, "CERTIFICATE", "caPem"),
        certPem: requirePem(tls.certPem, "CERTIFICATE", "certPem"),
        keyPem: requirePem(tls.keyPem, "PRIVATE KEY", "keyPem"),
      },
    };
    if (o.tcp.allowedClientNames) resolved.tcp.allowedClientNames = new Set(o.tcp.allowedClientNames);
  }
  return resolved;
}

function handlers(
  o: ResolvedAgentRpcServerOptions,
  authorize: Authorize,
  channels: ProcessChannels,
): grpc.UntypedServiceImplementation {
  const impl = o.impl;
  return {
    Health: unary(authorize, async () => healthToProto(await impl.health())),
    GetCapacity: unary(authorize, async () => capacityToProto(await impl.capacity())),
    ...containerHandlers(o.containers, authorize),
    ...sandboxHandlers(o.sandboxes, authorize),
    ...processHandlers(o.processes, authorize, channels),
    ...buildHandlers(buildsOf(o.containers), authorize),
  };
}

function allowClientNames(names: Set<string> | undefined): Authorize {
  if (!names) return () => {};
  return (call) => {
    const cn = call.getAuthContext().sslPeerCertificate?.subject?.CN;
    if (typeof cn !== "string" || !names.has(cn)) {
      throw new BerthError(
        "permission_denied",
        `client certificate ${cn ?? "(no CN)"} may not call this agent`,
      );
    }
  };
}

function bindAsync(server: grpc.Server, address: string, creds: grpc.ServerCredentials): Promise<number> {
  return new Promise((resolve, reject) => {
    server.bindAsync(address, creds, (err, port) => (err ? reject(err) : resolve(port)));
  });
}

async function shutdown(server: grpc.Server, graceMs: number): Promise<void> {
  await new Promise<void>((resolve) => {
    const force = setTimeout(() => {
      server.forceShutdown();
      resolve();
    }, graceMs);
    server.tryShutdown(() => {
      clearTimeout(force);
      resolve();
    });
  });
}

const tcpAddress = (host: string, port: number) =>
  isIP(host) === 6 ? `[${host}]:${port}` : `${host}:${port}`;

export async function startAgentRpcServer(options: AgentRpcServerOptions): Promise<AgentRpcServer> {
  const o = resolveAgentRpcServerOptions(options);
  const { service } = loadAgentProto();
  const closers: Array<() => Promise<void>> = [];
  const closeAll = async () => {
    for (const close of closers.splice(0).reverse()) await close();
  };
  const result: AgentRpcServer = { close: closeAll };
  try {
    if (o.unixSocket) {
      const server = new grpc.Server();
      const channels = new ProcessChannels();
      server.addService(
        service,
        handlers(o, () => {}, channels),
      );
      const socket = await bindUnixSocket(o.unixSocket, (address) =>
        bindAsync(server, address, grpc.ServerCredentials.createInsecure()),
      ).catch((e: unknown) => {
        server.forceShutdown();
        throw e;
      });
      closers.push(async () => {
        channels.drain();
        await shutdown(server, 5000);
        await socket.remove();
      });
      result.unixSocket = o.unixSocket;
    }
    if (o.tcp) {
      const server = new grpc.Server();
      const channels = new ProcessChannels();
      server.addService(service, handlers(o, allowClientNames(o.tcp.allowedClientNames), channels));
      const creds = grpc.ServerCredentials.createSsl(
        Buffer.from(o.tcp.tls.caPem),
        [{ cert_chain: Buffer.from(o.tcp.tls.certPem), private_key: Buffer.from(o.tcp.tls.keyPem) }],
        true, // require and verify a client certificate
      );
      const address = tcpAddress(o.tcp.host, o.tcp.port);
      try {
        result.tcpPort = await bindAsync(server, address, creds);
      } catch (e) {
        server.forceShutdown();
        throw new BerthError(
          "unavailable",
          `agent rpc: cannot listen on ${address}: ${(e as Error).message}`,
        );
      }
      closers.push(() => {
        channels.drain();
        return shutdown(server, 5000);
      });
    }
  } catch (e) {
    await closeAll();
    throw e;
  }
  return result;
}
