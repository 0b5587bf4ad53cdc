// The raw routes of the coordinator's server: plain requests and upgrades
// taken before Fastify routes anything (/endpoint/..., the /v1 POSTs,
// exposed ports, bot sessions, shells). An area offers its route as a value
// (endpointRoute, exposedPortRoute, ...) without knowing the server or the
// other routes; the edge (coordinator/edge/data-plane.ts) hands the list to
// the server. Each server has one table and one 'upgrade' listener: an
// upgrade goes to the first route that takes it, and one no route takes is
// answered a single 404. The type lives here, in the lowest tier, so that a
// product can export a route without importing the edge.

import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { BerthError } from "../../shared/errors.ts";
import type { EdgeLog } from "./public-error.ts";
import { refuseUpgrade, sendError } from "./raw-answer.ts";

export interface RawRoute {
  /** For logs and tests: which area's route this is. */
  readonly name: string;
  /**
   * Takes a plain request when it is this route's, and then owns `res`;
   * false leaves it to the next route (and at last to Fastify). Decided
   * synchronously, before any await, so that exactly one route answers.
   */
  takeHttp?(req: IncomingMessage, res: ServerResponse): boolean;
  /** Takes an upgrade when it is this route's, and then owns `socket`; decided synchronously too. */
  takeUpgrade?(req: IncomingMessage, socket: Duplex, head: Buffer): boolean;
  /** Frees what the route holds (a WebSocketServer) once it leaves its table. */
  close?(): void;
}

/** An ordered list of raw routes; the first that takes a request serves it. */
export class RawRouteTable {
  private routes: RawRoute[] = [];

  /** `log`: where a route that throws instead of answering is logged (its answer is masked either way). */
  constructor(public log?: EdgeLog) {}

  /** Appends `route`; the returned function takes it out again (and closes it). */
  add(route: RawRoute): () => void {
    this.routes = [...this.routes, route];
    return () => {
      if (!this.routes.includes(route)) return;
      this.routes = this.routes.filter((r) => r !== route);
      route.close?.();
    };
  }

  /** The routes' names, in the order they are asked. */
  names(): string[] {
    return this.routes.map((r) => r.name);
  }

  /** Whether a route took the plain request (then it answers); false: Fastify's. */
  takeHttp(req: IncomingMessage, res: ServerResponse): boolean {
    for (const route of this.routes) {
      if (!route.takeHttp) continue;
      try {
        if (route.takeHttp(req, res)) return true;
      } catch (e) {
        sendError(res, e, {
          ...this.logged(),
          what: `${route.name} request failed`,
          context: { url: req.url },
        });
        return true;
      }
    }
    return false;
  }

  /** Gives the upgrade to the first route that takes it; answers 404 when none does. */
  serveUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    // A reset from the peer is no crash; each route still watches its own socket's end.
    socket.on("error", () => {});
    for (const route of this.routes) {
      if (!route.takeUpgrade) continue;
      try {
        if (route.takeUpgrade(req, socket, head)) return;
      } catch (e) {
        refuseUpgrade(socket, e, {
          ...this.logged(),
          what: `${route.name} upgrade failed`,
          context: { url: req.url },
        });
        return;
      }
    }
    refuseUpgrade(socket, new BerthError("route_not_found", `no websocket route ${req.url?.split("?")[0]}`));
  }

  /** Closes every route (a server shutting down). */
  close(): void {
    for (const route of this.routes.splice(0)) route.close?.();
  }

  private logged(): { log?: EdgeLog } {
    return this.log ? { log: this.log } : {};
  }
}

/** Where a server keeps its table: on the server itself, so that two tables never answer one upgrade. */
const TABLE = Symbol("berth.rawRoutes");

/**
 * The server's route table, made (with the server's one 'upgrade' listener)
 * at first use. `log`, when given, becomes the table's.
 */
export function rawRoutesOf(server: Server, log?: EdgeLog): RawRouteTable {
  const holder = server as Server & { [TABLE]?: RawRouteTable };
  let table = holder[TABLE];
  if (!table) {
    const made = new RawRouteTable(log);
    holder[TABLE] = made;
    server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) =>
      made.serveUpgrade(req, socket, head),
    );
    table = made;
  } else if (log) table.log = log;
  return table;
}

/**
 * Serves `route`'s upgrades on `server` (not its plain requests: those reach
 * a route only through a server made by the edge's data plane). The way the
 * attach*Upgrades functions of the areas register until the composition root
 * hands every route to the edge. Returns a detach.
 */
export function addUpgradeRoute(server: Server, route: RawRoute): () => void {
  const { name, takeUpgrade, close } = route;
  return rawRoutesOf(server).add({
    name,
    ...(takeUpgrade ? { takeUpgrade: takeUpgrade.bind(route) } : {}),
    ...(close ? { close: close.bind(route) } : {}),
  });
}

/** A path segment of a raw route, %-decoded; a malformed escape is taken as written (it then matches nothing). */
export function decodePathSegment(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
