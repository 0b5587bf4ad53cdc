// The bridge a runner talks to (docs/tasks.md, Bridge protocol): HTTP/1.1
// with JSON bodies on the unix socket mounted into one runner container.
// The socket is the runner's identity: every call acts for that container.
// Errors are `{error: {code, message}}`; nothing internal leaks out.

import { chmod, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { describeError, isBerthError } from "../../shared/errors.ts";
import type { StateRequest } from "../../shared/objects.ts";
import { BridgeError } from "../tasks/bridge-error.ts";
import { type DatabaseDialer, serveDatabaseConnect } from "./db-connect.ts";
import { MAX_HAND_OUT, type TaskWorker } from "../tasks/worker.ts";
import type { StateRelayClient } from "./state-relay.ts";
import type { OutputRelayClient } from "./output-relay.ts";

export interface BridgeLogger {
  error(obj: object, msg?: string): void;
}

const KiB = 1024;
const MiB = 1024 * KiB;
/** Body limits per route: a result carries up to 4 MiB pickled (base64) plus its JSON copy. */
const LIMITS = {
  next: 64 * KiB,
  heartbeat: 64 * KiB,
  output: 1 * MiB,
  result: 12 * MiB,
  results: 64 * MiB,
  release: 1 * MiB,
  /** Queue, Map and Signal operations: a 1 MiB value, base64, in JSON. */
  state: 4 * MiB,
} as const;
type Route = keyof typeof LIMITS;

const TOP_ROUTES: Record<string, Route> = {
  "/v1/tasks/next": "next",
  "/v1/tasks/results": "results",
  "/v1/tasks/release": "release",
  "/v1/state": "state",
};
const TASK_ROUTE = /^\/v1\/tasks\/([A-Za-z0-9_.:-]{1,200})\/(output|heartbeat|result)$/;
const OUTPUT_ROUTE = /^\/v1\/outputs\/([A-Za-z0-9_-]{1,100})\/(url|stat)$/;

/** `?name=...&task_id=...` of an upload. */
function outputQuery(url: string): { name: string; taskId: string } {
  const q = new URL(url, "http://bridge").searchParams;
  return { name: q.get("name") ?? "", taskId: q.get("task_id") ?? "" };
}

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

interface ResultOutcome {
  id: string;
  status: number;
  error?: { code: string; message: string };
}

/** `{max: N}`: how many tasks a runner worker takes at once (1 when absent). */
function maxOf(body: unknown): number {
  const max = (body as { max?: unknown } | null)?.max;
  if (max === undefined || max === null) return 1;
  if (typeof max !== "number" || !Number.isInteger(max) || max < 1)
    throw new BridgeError(400, "invalid_request", "max must be a positive integer");
  return Math.min(max, MAX_HAND_OUT);
}

/** The status and body of an error answer; nothing internal leaks out. */
function errorAnswer(
  e: unknown,
  logInternal: (e: unknown) => void,
): { status: number; body: { error: { code: string; message: string } } } {
  if (e instanceof BridgeError)
    return { status: e.status, body: { error: { code: e.code, message: e.message } } };
  if (isBerthError(e)) {
    return { status: KIND_STATUS[e.kind] ?? 500, body: { error: { code: e.code, message: e.message } } };
  }
  logInternal(e);
  return {
    status: 500,
    body: { error: { code: "internal", message: "the agent failed to handle the request; see its log" } },
  };
}

export class BridgeServer {
  private readonly server: Server;

  constructor(
    readonly socketPath: string,
    private readonly containerId: string,
    /** The worker, once the agent has NATS; calls before that answer 503. */
    private readonly worker: () => TaskWorker | undefined,
    private readonly log: BridgeLogger,
    /** Queue, Map and Signal operations (docs/queues.md): the container's workspace and the relay once NATS is there. */
    private readonly state?: { workspaceId: string; relay: () => StateRelayClient | undefined },
    /** Outputs (docs/outputs.md): uploads and URL requests, relayed the same way. */
    private readonly outputs?: () => OutputRelayClient | undefined,
    /** False for a sandbox's or pod's workspace bridge: the task routes are not there. */
    private readonly tasks = true,
    /** Connects the container to its workspace's databases (db-connect.ts); none: those upgrades answer 503. */
    private readonly dialDatabase?: DatabaseDialer,
  ) {
    this.server = createServer({ keepAlive: true }, (req, res) => void this.handle(req, res));
    this.server.on("upgrade", (req, socket, head) => {
      void serveDatabaseConnect(req, socket, head, {
        workspaceId: this.state?.workspaceId,
        dial: this.dialDatabase,
      });
    });
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

  /** Aborts when the runner hangs up before the answer: its pull is withdrawn. */
  private waiting(res: ServerResponse): AbortSignal {
    const waiting = new AbortController();
    res.once("close", () => {
      if (!res.writableFinished) waiting.abort();
    });
    return waiting.signal;
  }

  /** One entry of a results batch: its own outcome, so one bad entry does not sink the others. */
  private async oneResult(worker: TaskWorker, r: unknown): Promise<ResultOutcome> {
    const id = (r as { id?: unknown })?.id;
    if (typeof id !== "string" || id === "")
      return { id: "", status: 400, error: { code: "invalid_request", message: "a result without an id" } };
    try {
      await worker.result(this.containerId, id, r);
      return { id, status: 204 };
    } catch (e) {
      const { status, body } = errorAnswer(e, (err) =>
        this.log.error(
          { containerId: this.containerId, err: describeError(err) },
          "task bridge result failed",
        ),
      );
      return { id, status, ...body };
    }
  }

  private async stateCall(body: unknown): Promise<Record<string, unknown>> {
    const relay = this.state?.relay();
    if (!this.state || !relay)
      throw new BridgeError(503, "unavailable", "the agent is not connected to NATS yet; ask again");
    return relay.call(this.state.workspaceId, body as StateRequest);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const path = (req.url ?? "").split("?")[0] ?? "";
      if (path === "/v1/outputs" || path.startsWith("/v1/outputs/")) {
        if (req.method !== "POST") throw new BridgeError(405, "invalid_request", `${path} takes POST only`);
        const relay = this.outputs?.();
        if (!this.state || !relay)
          throw new BridgeError(503, "unavailable", "the agent is not connected to NATS yet; ask again");
        const call = OUTPUT_ROUTE.exec(path);
        const answer = call
          ? await relay.call(this.state.workspaceId, call[2] as "url" | "stat", {
              ...((await readBody(req, 64 * KiB)) as object),
              id: call[1],
            })
          : await relay.upload(this.state.workspaceId, outputQuery(req.url ?? ""), req);
        return send(res, 200, answer);
      }
      const task = TASK_ROUTE.exec(path);
      const route: Route | undefined = TOP_ROUTES[path] ?? (task?.[2] as Route | undefined);
      if (!route || (!this.tasks && route !== "state"))
        throw new BridgeError(404, "route_not_found", `no route ${req.method} ${path}${route ? " (this container takes no tasks)" : ""}`);
      if (req.method !== "POST") throw new BridgeError(405, "invalid_request", `${path} takes POST only`);
      const body = await readBody(req, LIMITS[route]);
      if (route === "state") return send(res, 200, await this.stateCall(body));
      const worker = this.worker();
      if (!worker)
        throw new BridgeError(503, "unavailable", "the agent is not connected to NATS yet; ask again");
      const taskId = task?.[1] ?? "";
      switch (route) {
        case "next": {
          const tasks = await worker.next(this.containerId, this.waiting(res), maxOf(body));
          return tasks.length > 0 ? send(res, 200, { task: tasks[0], tasks }) : send(res, 204);
        }
        case "results": {
          const b = body as { results?: unknown; next?: unknown };
          if (!Array.isArray(b.results) || b.results.length > 10 * MAX_HAND_OUT)
            throw new BridgeError(400, "invalid_request", "results must be a list of {id, status, ...}");
          const results = await Promise.all(b.results.map((r) => this.oneResult(worker, r)));
          if (b.next === undefined || b.next === null) return send(res, 200, { results });
          const tasks = await worker.next(this.containerId, this.waiting(res), maxOf(b.next));
          return send(res, 200, { results, tasks });
        }
        case "release": {
          const ids = (body as { ids?: unknown }).ids;
          if (!Array.isArray(ids) || !ids.every((i) => typeof i === "string"))
            throw new BridgeError(400, "invalid_request", "release takes {ids: [task id, ...]}");
          return send(res, 200, { released: worker.release(this.containerId, ids as string[]) });
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
      const { status, body } = errorAnswer(e, (err) =>
        this.log.error(
          { containerId: this.containerId, err: describeError(err) },
          "task bridge request failed",
        ),
      );
      send(res, status, body);
    }
  }
}
