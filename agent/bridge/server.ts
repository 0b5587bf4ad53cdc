// The bridge a runner talks to (docs/tasks.md, Bridge protocol): HTTP/1.1
// with JSON bodies on the unix socket mounted into one runner container.
// The socket is the runner's identity: every call acts for that container.
// Errors are `{error: {code, message}}`; nothing internal leaks out.

import { chmod, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { describeError, isBerthError } from "../../shared/errors.ts";
import { BridgeError } from "../tasks/bridge-error.ts";
import type { TaskWorker } from "../tasks/worker.ts";

export interface BridgeLogger {
  error(obj: object, msg?: string): void;
}

const KiB = 1024;
const MiB = 1024 * KiB;
/** Body limits per route: a result carries up to 4 MiB pickled (base64) plus its JSON copy. */
const LIMITS = { next: 64 * KiB, heartbeat: 64 * KiB, output: 1 * MiB, result: 12 * MiB } as const;
type Route = keyof typeof LIMITS;

const TASK_ROUTE = /^\/v1\/tasks\/([A-Za-z0-9_.:-]{1,200})\/(output|heartbeat|result)$/;

const KIND_STATUS: Record<string, number> = {
  InvalidArgument: 400,
  NotFound: 404,
  Conflict: 409,
  FailedPrecondition: 409,
  ResourceExhausted: 413,
  Unavailable: 503,
};

function readBody(req: IncomingMessage, limit: number): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > limit) {
        reject(new BridgeError(413, "resource_exhausted", `the request body is over ${limit} bytes`));
        req.resume();
        return;
      }
      chunks.push(c);
    });
    req.on("error", reject);
    req.on("end", () => {
      if (size > limit) return;
      const text = Buffer.concat(chunks).toString("utf8");
      if (text.trim() === "") return resolve({});
      try {
        resolve(JSON.parse(text));
      } catch {
        reject(new BridgeError(400, "invalid_json", "the request body is not valid JSON"));
      }
    });
  });
}

function send(res: ServerResponse, status: number, body?: unknown): void {
  if (res.headersSent || res.destroyed) return;
  if (body === undefined) {
    res.writeHead(status).end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

export class BridgeServer {
  private readonly server: Server;

  constructor(
    readonly socketPath: string,
    private readonly containerId: string,
    /** The worker, once the agent has NATS; calls before that answer 503. */
    private readonly worker: () => TaskWorker | undefined,
    private readonly log: BridgeLogger,
  ) {
    this.server = createServer({ keepAlive: true }, (req, res) => void this.handle(req, res));
    // The runner keeps one connection open between calls; `next` may wait ~25 s on it.
    this.server.keepAliveTimeout = 120_000;
    this.server.requestTimeout = 0;
  }

  async listen(): Promise<void> {
    await rm(this.socketPath, { force: true });
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(this.socketPath, () => {
        this.server.off("error", reject);
        resolve();
      });
    });
    // Whatever uid the container runs as may connect; only this container sees the socket.
    await chmod(this.socketPath, 0o666);
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
    await rm(this.socketPath, { force: true });
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const path = (req.url ?? "").split("?")[0] ?? "";
      const task = TASK_ROUTE.exec(path);
      const route: Route | undefined = path === "/v1/tasks/next" ? "next" : (task?.[2] as Route | undefined);
      if (!route) throw new BridgeError(404, "route_not_found", `no route ${req.method} ${path}`);
      if (req.method !== "POST") throw new BridgeError(405, "invalid_request", `${path} takes POST only`);
      const body = await readBody(req, LIMITS[route]);
      const worker = this.worker();
      if (!worker)
        throw new BridgeError(503, "unavailable", "the agent is not connected to NATS yet; ask again");
      const taskId = task?.[1] ?? "";
      switch (route) {
        case "next": {
          const waiting = new AbortController();
          res.once("close", () => {
            if (!res.writableFinished) waiting.abort();
          });
          const t = await worker.next(this.containerId, waiting.signal);
          return t ? send(res, 200, { task: t }) : send(res, 204);
        }
        case "output": {
          const b = body as { stream?: unknown; data?: unknown };
          if ((b.stream !== "stdout" && b.stream !== "stderr") || typeof b.data !== "string") {
            throw new BridgeError(
              400,
              "invalid_request",
              'output must be {stream: "stdout"|"stderr", data: string}',
            );
          }
          worker.output(this.containerId, taskId, b.stream, b.data);
          return send(res, 204);
        }
        case "heartbeat":
          worker.heartbeat(this.containerId, taskId);
          return send(res, 204);
        case "result":
          await worker.result(this.containerId, taskId, body);
          return send(res, 204);
      }
    } catch (e) {
      if (e instanceof BridgeError)
        return send(res, e.status, { error: { code: e.code, message: e.message } });
      if (isBerthError(e)) {
        return send(res, KIND_STATUS[e.kind] ?? 500, { error: { code: e.code, message: e.message } });
      }
      this.log.error({ containerId: this.containerId, err: describeError(e) }, "task bridge request failed");
      send(res, 500, {
        error: { code: "internal", message: "the agent failed to handle the request; see its log" },
      });
    }
  }
}
