// A container's TCP connection to one of its workspace's databases
// (docs/databases.md, "Reaching a database"). Containers cannot open TCP to
// each other or to the host; the SDK's runtime instead asks its agent socket
// `GET /v1/databases/{local port}/connect` with `Upgrade: berth-tcp`, and
// after `101` the connection carries the database's bytes both ways. The
// agent dials the pod from the host, scoped to the socket's workspace: only
// a pod labelled with that workspace and that local port is ever dialled.

import type { IncomingMessage } from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";
import type { ContainerApi } from "../../api/index.ts";
import { DATABASE_CONNECT_ROUTE, DATABASE_UPGRADE, DatabaseLabels } from "../../shared/databases.ts";
import { BerthError, describeError, isBerthError } from "../../shared/errors.ts";
import { RunnerLabels } from "../../shared/tasks.ts";

/** Opens a TCP connection to the workspace's database on `localPort`; not_found when none runs here. */
export type DatabaseDialer = (workspaceId: string, localPort: number) => Promise<Socket>;

const STATUS: Record<string, string> = {
  400: "Bad Request",
  404: "Not Found",
  502: "Bad Gateway",
  503: "Service Unavailable",
};

/** Whether the upgrade request is a database connect (the bridge's other upgrades are refused). */
export function isDatabaseConnect(req: IncomingMessage): boolean {
  return DATABASE_CONNECT_ROUTE.test((req.url ?? "").split("?")[0] ?? "");
}

function refuse(socket: Duplex, status: number, code: string, message: string): void {
  const body = JSON.stringify({ error: { code, message } });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS[status] ?? "Error"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}

/** Answers one upgrade request on a container's bridge socket. */
export async function serveDatabaseConnect(
  req: IncomingMessage,
  socket: Duplex,
  head: Buffer,
  o: { workspaceId: string | undefined; dial: DatabaseDialer | undefined },
): Promise<void> {
  socket.on("error", () => {});
  const m = DATABASE_CONNECT_ROUTE.exec((req.url ?? "").split("?")[0] ?? "");
  const port = Number(m?.[1]);
  if (!m || !(port >= 1 && port <= 65535))
    return refuse(socket, 404, "route_not_found", `no upgrade route ${req.url ?? ""}`);
  if (String(req.headers.upgrade ?? "").toLowerCase() !== DATABASE_UPGRADE)
    return refuse(socket, 400, "invalid_request", `a database connect needs Upgrade: ${DATABASE_UPGRADE}`);
  if (!o.workspaceId || !o.dial)
    return refuse(socket, 503, "unavailable", "this agent does not connect containers to databases");
  let upstream: Socket;
  try {
    upstream = await o.dial(o.workspaceId, port);
  } catch (e) {
    if (isBerthError(e) && e.code === "not_found") return refuse(socket, 404, "not_found", e.message);
    return refuse(
      socket,
      502,
      "unavailable",
      `cannot reach the database on local port ${port}: ${describeError(e)}`,
    );
  }
  if (socket.destroyed) {
    upstream.destroy();
    return;
  }
  socket.write(
    `HTTP/1.1 101 Switching Protocols\r\nupgrade: ${DATABASE_UPGRADE}\r\nconnection: Upgrade\r\n\r\n`,
  );
  if (head.length > 0) upstream.write(head);
  upstream.on("error", () => socket.destroy());
  socket.on("close", () => upstream.destroy());
  upstream.on("close", () => socket.destroy());
  socket.pipe(upstream);
  upstream.pipe(socket);
}

/**
 * Dials a database pod of this host: the running container labelled with the
 * workspace and the local port, at its address and server port. A pod on
 * another host is not reached from here (docs/databases.md).
 */
export function localDatabaseDialer(
  host: () => Pick<ContainerApi, "listContainers"> | undefined,
  timeoutMs = 10_000,
): DatabaseDialer {
  return async (workspaceId, localPort) => {
    const api = host();
    if (!api) throw new BerthError("unavailable", "the agent's containers are not up yet");
    const pods = await api.listContainers({
      labels: { [RunnerLabels.workspaceId]: workspaceId, [DatabaseLabels.localPort]: String(localPort) },
    });
    const pod = pods.find((c) => c.state === "running" && c.ipv4);
    const serverPort = Number(pod?.labels[DatabaseLabels.serverPort]);
    if (!pod?.ipv4 || !(serverPort > 0))
      throw new BerthError(
        "not_found",
        `no database of this workspace on local port ${localPort} runs on this agent's host (is it started? berth db list)`,
      );
    const ipv4 = pod.ipv4;
    return new Promise<Socket>((resolve, reject) => {
      const s = connect({ host: ipv4, port: serverPort });
      const timer = setTimeout(() => s.destroy(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
      s.once("connect", () => {
        clearTimeout(timer);
        s.off("error", reject);
        resolve(s);
      });
      s.once("error", (e) => {
        clearTimeout(timer);
        reject(e);
      });
    });
  };
}
