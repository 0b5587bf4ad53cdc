// A real HTTP server answering the deployment routes of docs/deployments.md
// the way the coordinator documents them, recording every request, so the
// CLI's deploy/serve/deployment commands can be run as real processes
// against it. It keeps deployments in memory; it is not the coordinator.

import { createHash } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";

export interface Recorded {
  method: string;
  path: string;
  query: URLSearchParams;
  auth: string | undefined;
  json?: Record<string, unknown>;
  bytes?: Buffer;
}

export interface DeploymentRecord {
  id: string;
  name: string;
  version: number;
  type: string;
  stub_id: string;
  active: boolean;
  serve: boolean;
  url: string;
  created_at: string;
  updated_at: string;
  last_request_at: string | null;
}

export const WS = "ws-cli-test";

export class RecordingCoordinator {
  readonly requests: Recorded[] = [];
  readonly objects = new Map<string, Buffer>();
  readonly deployments = new Map<string, DeploymentRecord>();
  /** Open log streams by deployment id: the test writes NDJSON lines to them. */
  readonly logStreams = new Map<string, ServerResponse[]>();
  private server?: Server;
  private seq = 0;
  url = "";

  constructor(readonly token: string) {}

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      void this.handle(req, res).catch((e: unknown) => {
        res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { code: "internal", message: String(e) } }));
      });
    });
    await new Promise<void>((r) => this.server!.listen(0, "127.0.0.1", r));
    this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}`;
    return this;
  }

  async stop(): Promise<void> {
    for (const list of this.logStreams.values()) for (const r of list) r.destroy();
    this.server?.closeAllConnections();
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
  }

  of(method: string, prefix: string): Recorded[] {
    return this.requests.filter((r) => r.method === method && r.path.startsWith(prefix));
  }

  /** Lines logged per deployment: a (re)opened stream gets them all first, as the route's tail does. */
  private readonly logHistory = new Map<string, string[]>();

  /** Writes a log line to every open log stream of the deployment. */
  log(depId: string, containerId: string, line: string, stream = "stdout"): void {
    const json = `${JSON.stringify({ container_id: containerId, stream, line, ts: Date.now() })}\n`;
    this.logHistory.set(depId, [...(this.logHistory.get(depId) ?? []), json]);
    for (const r of this.logStreams.get(depId) ?? []) if (!r.destroyed) r.write(json);
  }

  /** Ends the open log streams of a deployment, as a coordinator restart would. */
  endLogStreams(depId: string): void {
    for (const r of this.logStreams.get(depId) ?? []) r.end();
    this.logStreams.set(depId, []);
  }

  private send(res: ServerResponse, status: number, body?: unknown): void {
    if (body === undefined) {
      res.writeHead(status).end();
      return;
    }
    res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const u = new URL(req.url ?? "/", this.url);
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks);
    const rec: Recorded = {
      method: req.method ?? "",
      path: u.pathname,
      query: u.searchParams,
      auth: req.headers.authorization,
    };
    if (String(req.headers["content-type"]).startsWith("application/json"))
      rec.json = JSON.parse(raw.toString());
    else if (raw.length > 0) rec.bytes = raw;
    this.requests.push(rec);
    if (req.headers.authorization !== `Bearer ${this.token}`) {
      return this.send(res, 401, {
        ok: false,
        error: { code: "unauthenticated", message: "unknown or revoked token" },
      });
    }
    const m = (re: RegExp) => re.exec(u.pathname);
    if (req.method === "GET" && u.pathname === "/api/v1/workspace/current") {
      return this.send(res, 200, { external_id: WS, name: "cli", created_at: new Date().toISOString() });
    }
    const object = m(/^\/api\/v1\/gateway\/objects\/([0-9a-f]{64})$/);
    if (object) {
      const sha = object[1]!;
      if (req.method === "GET") return this.send(res, 200, { ok: true, exists: this.objects.has(sha) });
      if (createHash("sha256").update(raw).digest("hex") !== sha) {
        return this.send(res, 200, {
          ok: false,
          error: { code: "object_hash_mismatch", message: "hash mismatch" },
        });
      }
      this.objects.set(sha, raw);
      return this.send(res, 200, { ok: true, object_id: this.objects.size });
    }
    if (req.method === "POST" && u.pathname === "/api/v1/gateway/deployments")
      return this.deploy(res, rec.json ?? {});
    const logs = m(/^\/api\/v1\/gateway\/deployments\/([^/]+)\/logs$/);
    if (logs && req.method === "GET") {
      const g = logs;
      if (!this.deployments.has(g[1]!)) {
        return this.send(res, 200, {
          ok: false,
          error: { code: "not_found", message: `deployment ${g[1]} not found` },
        });
      }
      res.writeHead(200, { "content-type": "application/x-ndjson" });
      res.flushHeaders();
      for (const line of this.logHistory.get(g[1]!) ?? []) res.write(line);
      const list = this.logStreams.get(g[1]!) ?? [];
      list.push(res);
      this.logStreams.set(g[1]!, list);
      return;
    }
    const base = `/api/v1/deployment/${WS}`;
    if (req.method === "GET" && u.pathname === base) {
      const name = u.searchParams.get("name");
      const list = [...this.deployments.values()].filter((d) => name === null || d.name === name).reverse();
      return this.send(res, 200, { deployments: list });
    }
    const g = m(/^\/api\/v1\/deployment\/[^/]+\/(stop|start)\/([^/]+)$/);
    if (g && req.method === "POST") {
      const d = this.deployments.get(g[2]!);
      if (!d)
        return this.send(res, 404, { error: { code: "not_found", message: `deployment ${g[2]} not found` } });
      d.active = g[1] === "start";
      return this.send(res, 200, d);
    }
    const one = m(/^\/api\/v1\/deployment\/[^/]+\/([^/]+)$/);
    if (one) {
      const d = this.deployments.get(one[1]!);
      if (!d)
        return this.send(res, 404, {
          error: { code: "not_found", message: `deployment ${one[1]} not found` },
        });
      if (req.method === "GET")
        return this.send(res, 200, { ...d, containers: 1, queue_depth: 0, events: [] });
      if (req.method === "DELETE") {
        this.deployments.delete(d.id);
        for (const r of this.logStreams.get(d.id) ?? []) r.end();
        return this.send(res, 204);
      }
    }
    return this.send(res, 404, {
      error: { code: "route_not_found", message: `no route ${req.method} ${u.pathname}` },
    });
  }

  private deploy(res: ServerResponse, b: Record<string, unknown>): void {
    const extra = (b.extra ?? {}) as { code_sha256?: string };
    const fail = (message: string) =>
      this.send(res, 200, { ok: false, error: { code: "invalid_request", message } });
    if (typeof b.name !== "string" || typeof b.type !== "string") {
      fail("name and type are required");
      return;
    }
    if (!extra.code_sha256 || !this.objects.has(extra.code_sha256)) {
      fail(`no code object ${extra.code_sha256}: upload it first`);
      return;
    }
    if (b.name === "refused") {
      fail("refused is a name this coordinator refuses");
      return;
    }
    const now = new Date().toISOString();
    const serve = b.serve === true;
    const same = [...this.deployments.values()].filter((d) => d.name === b.name && d.serve === serve);
    const existing = serve ? same[0] : undefined;
    if (existing) {
      existing.updated_at = now;
      this.send(res, 200, { ok: true, deployment: existing });
      return;
    }
    const version = serve ? 0 : Math.max(0, ...same.map((d) => d.version)) + 1;
    const d: DeploymentRecord = {
      id: `dep_${++this.seq}`,
      name: b.name,
      version,
      type: b.type,
      stub_id: `stub_${this.seq}`,
      active: true,
      serve,
      url: `${this.url}/${b.type === "taskqueue" ? "taskqueue" : "endpoint"}/${b.name}${serve ? "" : `/v${version}`}`,
      created_at: now,
      updated_at: now,
      last_request_at: null,
    };
    this.deployments.set(d.id, d);
    this.send(res, 200, { ok: true, deployment: d });
  }
}
