// Exposed container ports (docs/sandboxes.md, Exposed ports):
// `/port/{containerId}/{port}/...` and `{containerId}-{port}.{endpointDomain}`
// are proxied, HTTP and websockets, through the agent's tunnel (or straight to
// the container on the same host) to that port. Nothing is recorded per
// request beyond the activity hook (a sandbox's TTL counts from it).

import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { Logger } from "pino";
import { BerthError } from "../../shared/errors.ts";
import { errorOf, forwardPlain, type TunnelDialer, upstreamHeaders } from "../containers/index.ts";
import {
  addUpgradeRoute,
  checkAccess,
  MaskedError,
  type RawRoute,
  refuseUpgrade,
  sendError,
} from "../http/index.ts";
import { EndpointAuth, spliceUpgrade, upgradeHead } from "../endpoints/index.ts";
import type { TokenRepo } from "../store/index.ts";

/** Who runs an exposed port and who may reach it. */
export interface PortTarget {
  agentId: string;
  workspaceId: string;
  /** Pods deployed with authorized=True: a Bearer token of the workspace is needed. */
  requiresAuth: boolean;
}

/** The containers whose ports are exposed (the sandbox service); undefined: not an exposed port. */
export interface PortTargets {
  find(containerId: string, port: number): Promise<PortTarget | undefined>;
}

export interface PortProxyDeps {
  targets: PortTargets;
  tunnels: TunnelDialer;
  tokens: TokenRepo;
  log: Logger;
  /** Host names `{containerId}-{port}.{endpointDomain}` serve the port too. */
  endpointDomain?: string;
  /** Called with the container id for each request and websocket (a sandbox's TTL runs from its last activity). */
  onActivity?: (containerId: string) => void;
  /** ms since epoch. @default Date.now */
  clock?: () => number;
}

/** Which port a request is for and what the container gets as its path. */
export interface PortRoute {
  containerId: string;
  port: number;
  /** The path and query the container gets ("/..."). */
  path: string;
  /** The part of the URL naming the port (X-Forwarded-Prefix); "" for a host name. */
  prefix: string;
}

const PATH = /^\/port\/([^/?#]+)\/([^/?#]+)(\/[^?#]*)?(\?.*)?$/;
const HOST_LABEL = /^([a-z0-9][a-z0-9_.-]*?)-(\d{1,5})$/;

function portNumber(text: string): number {
  const n = /^\d{1,5}$/.test(text) ? Number(text) : Number.NaN;
  if (!(n >= 1 && n <= 65535))
    throw new BerthError("invalid_request", `port ${JSON.stringify(text)} is not a number from 1 to 65535`);
  return n;
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/**
 * The port a request names, by path (`/port/{id}/{port}/...`) or by host
 * name; undefined when it is for neither. Throws invalid_request for a bad port number.
 */
export function portRoute(
  url: string,
  host: string | undefined,
  endpointDomain: string | undefined,
): PortRoute | undefined {
  if (url.startsWith("/port/")) {
    const m = PATH.exec(url);
    if (!m) throw new BerthError("not_found", "use /port/{container_id}/{port}/...");
    const containerId = decode(m[1] as string);
    const port = portNumber(m[2] as string);
    return { containerId, port, path: `${m[3] ?? "/"}${m[4] ?? ""}`, prefix: `/port/${m[1]}/${m[2]}` };
  }
  // A deployment's host name was already rewritten to /endpoint/id/... (endpoints/host-names.ts).
  if (!endpointDomain || !host || url.startsWith("/endpoint/")) return undefined;
  const name = host.toLowerCase().replace(/:\d+$/, "").replace(/\.$/, "");
  const suffix = `.${endpointDomain.toLowerCase()}`;
  if (!name.endsWith(suffix)) return undefined;
  const m = HOST_LABEL.exec(name.slice(0, -suffix.length));
  if (!m) return undefined;
  return {
    containerId: m[1] as string,
    port: portNumber(m[2] as string),
    path: url.startsWith("/") ? url : `/${url}`,
    prefix: "",
  };
}

export class PortProxy {
  private readonly auth: EndpointAuth;

  constructor(private readonly deps: PortProxyDeps) {
    this.auth = new EndpointAuth(deps.tokens, deps.clock ?? Date.now);
  }

  /** Whether the request is for an exposed port (by path or host name). */
  claims(req: IncomingMessage): boolean {
    const url = req.url ?? "/";
    if (url.startsWith("/port/")) return true;
    try {
      return portRoute(url, req.headers.host, this.deps.endpointDomain) !== undefined;
    } catch {
      return true;
    }
  }

  /** The route and target of a request, checked against the caller's token when the port needs one. */
  private async resolve(
    req: IncomingMessage,
  ): Promise<{ route: PortRoute; target: PortTarget; tokenUsed: boolean }> {
    const route = portRoute(req.url ?? "/", req.headers.host, this.deps.endpointDomain);
    if (!route) throw new BerthError("not_found", "not an exposed port URL");
    const notFound = () =>
      new BerthError(
        "not_found",
        `port ${route.port} of container ${route.containerId} is not exposed (or the container is gone)`,
      );
    const target = await this.deps.targets.find(route.containerId, route.port);
    if (!target) throw notFound();
    if (!target.requiresAuth) return { route, target, tokenUsed: false };
    const authorization = req.headers.authorization;
    if (!authorization)
      throw new BerthError(
        "unauthenticated",
        "this port needs 'Authorization: Bearer <token>' of its workspace",
      );
    const p = await this.auth.principal(authorization);
    if (!p) throw new BerthError("unauthenticated", "unknown or revoked token");
    if (p.workspace.id !== target.workspaceId) throw notFound();
    checkAccess(p, { needs: "invoke" });
    return { route, target, tokenUsed: true };
  }

  /** One plain HTTP request to an exposed port: writes the whole answer; never rejects. */
  async serveHttp(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      let resolved: Awaited<ReturnType<PortProxy["resolve"]>>;
      try {
        resolved = await this.resolve(req);
      } catch (e) {
        sendError(res, e, {
          log: this.deps.log,
          what: "exposed port request failed",
          context: { url: req.url },
        });
        return;
      }
      const { route, target, tokenUsed } = resolved;
      this.deps.onActivity?.(route.containerId);
      await forwardPlain({
        agent: this.deps.tunnels.httpAgent(target.agentId, route.containerId, route.port),
        containerId: route.containerId,
        port: route.port,
        method: req.method ?? "GET",
        path: route.path,
        headers: upstreamHeaders(req.headers, {
          dropAuthorization: tokenUsed,
          remoteAddress: req.socket.remoteAddress,
          prefix: route.prefix,
        }),
        req,
        res,
        log: this.deps.log,
        about: portOf(route),
      });
    } catch (e) {
      if (!res.headersSent)
        sendError(res, e, {
          log: this.deps.log,
          what: "exposed port request failed",
          context: { url: req.url },
        });
      else {
        this.deps.log.error({ err: e, url: req.url }, "exposed port request failed");
        res.destroy();
      }
    }
  }

  /** One upgrade (websocket) to an exposed port; never rejects. */
  async serveUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on("error", () => {});
    let resolved: Awaited<ReturnType<PortProxy["resolve"]>>;
    try {
      resolved = await this.resolve(req);
    } catch (e) {
      refuseUpgrade(socket, e, {
        log: this.deps.log,
        what: "exposed port upgrade failed",
        context: { url: req.url },
      });
      return;
    }
    this.deps.onActivity?.(resolved.route.containerId);
    let upstream: Duplex;
    try {
      upstream = await this.deps.tunnels.connect(
        resolved.target.agentId,
        resolved.route.containerId,
        resolved.route.port,
      );
    } catch (e) {
      const about = portOf(resolved.route);
      refuseUpgrade(
        socket,
        new MaskedError("bad_gateway", `the connection to ${about} failed: ${errorOf(e)}`, {
          about,
          cause: e,
        }),
        {
          log: this.deps.log,
          what: "exposed port upgrade failed",
          context: { url: req.url },
        },
      );
      return;
    }
    const { route, tokenUsed } = resolved;
    const headers = upstreamHeaders(req.headers, {
      dropAuthorization: tokenUsed,
      remoteAddress: req.socket.remoteAddress,
      prefix: route.prefix,
    });
    headers.connection = "Upgrade";
    if (req.headers.upgrade) headers.upgrade = req.headers.upgrade;
    await spliceUpgrade(socket, upstream, upgradeHead(req.method ?? "GET", route.path, headers), head);
  }
}

/** One request to an exposed port, for the coordinator's server (before Fastify); never rejects. */
export function servePortRequest(ports: PortProxy, req: IncomingMessage, res: ServerResponse): Promise<void> {
  return ports.serveHttp(req, res);
}

/** The port a failure is about, in the caller's terms. */
const portOf = (route: PortRoute) => `port ${route.port} of container ${route.containerId}`;

/** Exposed ports' raw route (coordinator/http/raw-routes.ts): requests and upgrades, by path or host name. */
export function exposedPortRoute(ports: PortProxy): RawRoute {
  return {
    name: "ports",
    takeHttp(req, res) {
      if (!ports.claims(req)) return false;
      void servePortRequest(ports, req, res);
      return true;
    },
    takeUpgrade(req, socket, head) {
      if (!ports.claims(req)) return false;
      void ports.serveUpgrade(req, socket, head);
      return true;
    },
  };
}

/**
 * Serves upgrades to exposed ports on `server`, through its raw route table:
 * until the composition root hands exposedPortRoute to the edge. Returns a detach.
 */
export function attachPortUpgrades(server: Server, ports: PortProxy): () => void {
  return addUpgradeRoute(server, exposedPortRoute(ports));
}
