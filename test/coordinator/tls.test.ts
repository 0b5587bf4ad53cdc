// The coordinator over HTTPS (coordinator option `tls`): a real coordinator
// (startCoordinator, real nats-server, SQLite) and a bare HTTP app, both
// with a certificate for 127.0.0.1 issued by a CA made at test time; clients
// trust it with `ca` or NODE_EXTRA_CA_CERTS, as an operator with a private
// CA would.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { request as httpRequest, type IncomingMessage } from "node:http";
import { request as httpsRequest } from "node:https";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, test } from "node:test";
import pino from "pino";
import type { ExecSession } from "../../api/index.ts";
import { FleetView } from "../../coordinator/fleet/fleet-view.ts";
import { bareHttpApp } from "../helpers/bare-app.ts";
import { attachShellUpgrades } from "../../coordinator/edge/shell.ts";
import { type RunningCoordinator, StartupError, startCoordinator } from "../../coordinator/main.ts";
import { loadTlsCredentials, resolveCoordinatorOptions } from "../../coordinator/options.ts";
import { createClusterCa, issueCertificate } from "../../coordinator/pki/ca.ts";
import { portUrl } from "../../coordinator/ports/urls.ts";
import { Store } from "../../coordinator/records.ts";
import { freePort } from "../../shared/net.ts";
import { tempDir } from "../helpers/env.ts";
import { storeJoinService } from "../helpers/join.ts";
import { startTestNats, type TestNats } from "../helpers/nats.ts";
import { bearer } from "../helpers/auth.ts";

const CLI_BIN = fileURLToPath(new URL("../../cli/bin.js", import.meta.url));
const SHELL_CLIENT = fileURLToPath(new URL("../../cli/commands/shell.ts", import.meta.url));
const REPO = fileURLToPath(new URL("../..", import.meta.url));

interface Answer {
  status: number;
  body: string;
  keepAlive?: string;
}

/** One HTTPS request trusting `ca`; an upgrade request's refusal is an ordinary response. */
function httpsGet(url: string, o: { ca?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { ...(o.ca ? { ca: o.ca } : {}), headers: o.headers ?? {} }, (res) =>
      collect(res).then(resolve, reject),
    );
    req.on("upgrade", (_res, socket) => {
      socket.destroy();
      reject(new Error("upgraded"));
    });
    req.on("error", reject);
    req.end();
  });
}

async function collect(res: IncomingMessage): Promise<Answer> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  return {
    status: res.statusCode ?? 0,
    body: Buffer.concat(chunks).toString("utf8"),
    keepAlive: String(res.headers["keep-alive"] ?? ""),
  };
}

const upgradeHeaders = (token: string) => ({
  ...bearer(token),
  connection: "Upgrade",
  upgrade: "websocket",
  "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
  "sec-websocket-version": "13",
});

/** Runs a node process (tsx loaded) to its end; stdout, stderr and exit code. */
function runNode(
  args: string[],
  env: NodeJS.ProcessEnv,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { cwd: REPO, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => {
      stdout += c.toString();
    });
    child.stderr.on("data", (c: Buffer) => {
      stderr += c.toString();
    });
    const kill = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(kill);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `process.env` without a CA of the caller's and without the CLI's profile. */
function cleanEnv(dir: string, over: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, BERTH_CONFIG: join(dir, "no-config.json"), ...over };
  for (const k of ["NODE_EXTRA_CA_CERTS", "SERVICE_TOKEN", "BERTH_URL", "BERTH_PROFILE"]) {
    if (!(k in over)) delete env[k];
  }
  return env;
}

/** A shell-like exec: what is written comes back upper-cased; "exit\n" ends it with code 7. */
function shoutingSession(): ExecSession {
  const queue: Buffer[] = [];
  let wake: (() => void) | undefined;
  let done = false;
  let finish: (code: number) => void = () => {};
  const exit = new Promise<number>((r) => {
    finish = r;
  });
  const push = (b: Buffer) => {
    queue.push(b);
    wake?.();
  };
  return {
    output: (async function* () {
      for (;;) {
        while (queue.length > 0) yield { stream: "stdout" as const, data: queue.shift() as Buffer };
        if (done) return;
        await new Promise<void>((r) => {
          wake = r;
        });
      }
    })() as unknown as ExecSession["output"],
    writeStdin(data) {
      const text = Buffer.from(data).toString("utf8");
      push(Buffer.from(text.toUpperCase()));
      if (text.includes("exit\n")) {
        done = true;
        wake?.();
        finish(7);
      }
    },
    closeStdin() {},
    resize() {},
    kill() {
      done = true;
      wake?.();
      finish(137);
    },
    exit,
  };
}

describe("coordinator over TLS", () => {
  const cleanups: (() => unknown)[] = [];
  const hooks = { after: (fn: () => unknown) => cleanups.push(fn) };
  let dir: string;
  let caPem: string;
  let certFile: string;
  let keyFile: string;
  let otherKeyFile: string;
  let nats: TestNats;
  let coordinator: RunningCoordinator;
  let url: string;
  let admin: string;

  before(async () => {
    dir = tempDir(hooks, "berth-tls-");
    const ca = await createClusterCa({ commonName: "berth test CA" });
    const server = await issueCertificate(ca, {
      commonName: "127.0.0.1",
      ipAddresses: ["127.0.0.1"],
      usage: "server",
    });
    const other = await issueCertificate(ca, {
      commonName: "127.0.0.1",
      ipAddresses: ["127.0.0.1"],
      usage: "server",
    });
    caPem = ca.certPem;
    certFile = join(dir, "server.pem");
    keyFile = join(dir, "server.key");
    otherKeyFile = join(dir, "other.key");
    writeFileSync(join(dir, "ca.pem"), ca.certPem);
    writeFileSync(certFile, server.certPem);
    writeFileSync(keyFile, server.keyPem, { mode: 0o600 });
    writeFileSync(otherKeyFile, other.keyPem, { mode: 0o600 });

    nats = await startTestNats(hooks);
    const port = await freePort();
    const o = resolveCoordinatorOptions({
      host: "127.0.0.1",
      port,
      dataDir: join(dir, "coordinator"),
      nats: { url: nats.url, user: "coordinator", password: nats.coordinator.password },
      agentNats: { url: nats.url, user: "agent", password: nats.agent.password },
      tls: { certFile, keyFile },
    });
    coordinator = await startCoordinator(o, pino({ level: "silent" }));
    cleanups.push(() => coordinator.stop());
    url = coordinator.url;
    admin = readFileSync(join(dir, "coordinator", "admin-token"), "utf8").trim();
  });
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  test("the public URL defaults to https:// with tls; an explicit publicUrl wins", () => {
    assert.equal(url, `https://127.0.0.1:${coordinator.port}`);
    const base = { nats: { url: "nats://x:4222" }, agentNats: { password: "pw" } };
    const tls = { certFile: "/c.pem", keyFile: "/k.pem" };
    assert.equal(resolveCoordinatorOptions({ ...base, tls }).publicUrl, "https://127.0.0.1:8420");
    assert.equal(resolveCoordinatorOptions({ ...base }).publicUrl, "http://127.0.0.1:8420");
    assert.equal(
      resolveCoordinatorOptions({ ...base, tls, publicUrl: "https://berth.example.com/" }).publicUrl,
      "https://berth.example.com",
    );
  });

  test("healthz over https with the CA; refused without it", async () => {
    const r = await httpsGet(`${url}/healthz`, { ca: caPem });
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.body).ok, true);
    await assert.rejects(httpsGet(`${url}/healthz`), /self[- ]signed|unable to verify|certificate/i);
  });

  test("idle connections are kept 72 s (Fastify's default), not node's 5 s", async () => {
    // The coordinator makes its own server (endpoints before Fastify); Fastify sets its keep-alive
    // only on servers it makes, and a 5 s one raced clients' reuse of idle connections.
    const r = await httpsGet(`${url}/healthz`, { ca: caPem, headers: { connection: "keep-alive" } });
    assert.equal(r.status, 200);
    assert.match(r.keepAlive ?? "", /timeout=72\b/);
  });

  test("plain HTTP to the TLS port gets no answer", async () => {
    await assert.rejects(
      new Promise<Answer>((resolve, reject) => {
        const req = httpRequest(`http://127.0.0.1:${coordinator.port}/healthz`, (res) =>
          collect(res).then(resolve, reject),
        );
        req.on("error", reject);
        req.end();
      }),
      (e: NodeJS.ErrnoException) => e.code === "ECONNRESET" || e.code === "EPIPE",
    );
  });

  test("exposed-port URLs take the https scheme of the public URL", () => {
    assert.equal(portUrl(url, undefined, "ctr-a1", 8080), `${url}/port/ctr-a1/8080/`);
    assert.equal(
      portUrl(url, "apps.example.com", "ctr-a1", 8080),
      `https://ctr-a1-8080.apps.example.com:${coordinator.port}/`,
    );
  });

  test("websocket upgrades reach the shell, port and endpoint handlers over TLS", async () => {
    const shell = await httpsGet(`${url}/api/v1/container/ws-x/ctr-none/shell`, {
      ca: caPem,
      headers: upgradeHeaders("bt_not_a_token"),
    });
    assert.equal(shell.status, 401, shell.body);
    assert.equal(JSON.parse(shell.body).error.code, "unauthenticated");
    const port = await httpsGet(`${url}/port/ctr-none/8080/`, { ca: caPem, headers: upgradeHeaders(admin) });
    assert.equal(port.status, 404, port.body);
    assert.equal(JSON.parse(port.body).error.code, "not_found");
    const endpoint = await httpsGet(`${url}/endpoint/id/dep-none`, {
      ca: caPem,
      headers: upgradeHeaders(admin),
    });
    assert.equal(endpoint.status, 404, endpoint.body);
  });

  test("the CLI reaches an https coordinator with NODE_EXTRA_CA_CERTS, and not without", async () => {
    const env = { BERTH_URL: url, SERVICE_TOKEN: admin };
    const ok = await runNode(
      [CLI_BIN, "workspace", "current", "--json"],
      cleanEnv(dir, { ...env, NODE_EXTRA_CA_CERTS: join(dir, "ca.pem") }),
    );
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(JSON.parse(ok.stdout).name, "default");
    const untrusted = await runNode([CLI_BIN, "workspace", "current", "--json"], cleanEnv(dir, env));
    assert.notEqual(untrusted.code, 0);
    assert.match(untrusted.stderr, /cannot reach https:\/\/127\.0\.0\.1/);
  });

  test("berth shell's client runs a session over TLS (bare HTTP app with tls, no endpoints)", async (t) => {
    const store = await Store.open(`sqlite:${tempDir(t)}/b.db`);
    t.after(() => store.close());
    const joinService = await storeJoinService(store);
    const app = await bareHttpApp({
      store,
      fleet: new FleetView(),
      join: joinService,
      tls: loadTlsCredentials({ certFile, keyFile }),
    });
    t.after(() => app.close());
    const ws = await store.workspaces.create("main");
    const token = (await store.tokens.create(ws.id)).secret;
    attachShellUpgrades(app.server, {
      tokens: store.tokens,
      targets: [
        { find: async (id) => (id === "ctr-tty1" ? { agentId: "agent-1", workspaceId: ws.id } : undefined) },
      ],
      agents: { client: () => ({ exec: async () => shoutingSession() }) },
      log: pino({ level: "silent" }),
    });
    await app.listen({ host: "127.0.0.1", port: 0 });
    const appUrl = `https://127.0.0.1:${(app.server.address() as { port: number }).port}`;
    // A child process: NODE_EXTRA_CA_CERTS is read once, at process start.
    const script = `
      const { openShell } = await import(${JSON.stringify(SHELL_CLIENT)});
      let out = "";
      const done = new Promise((resolve) => {
        let code;
        openShell({
          url: process.env.BERTH_URL, token: process.env.SERVICE_TOKEN, workspace: ${JSON.stringify(ws.externalId)},
          containerId: "ctr-tty1", cols: 80, rows: 24,
          onData: (d) => { out += d.toString(); },
          onExit: (c) => { code = c; },
          onClose: () => resolve(code),
        }).then((conn) => { conn.write("hello over tls\\n"); conn.write("exit\\n"); },
                (e) => { console.log(JSON.stringify({ error: e.code ?? e.message })); process.exit(0); });
      });
      const code = await done;
      console.log(JSON.stringify({ out, code }));
    `;
    const run = (over: NodeJS.ProcessEnv) =>
      runNode(
        ["--import", "tsx", "--input-type=module", "-e", script],
        cleanEnv(dir, { BERTH_URL: appUrl, ...over }),
      );
    const trusted = await run({ SERVICE_TOKEN: token, NODE_EXTRA_CA_CERTS: join(dir, "ca.pem") });
    assert.equal(trusted.code, 0, trusted.stderr);
    const session = JSON.parse(trusted.stdout.trim().split("\n").pop() as string);
    assert.equal(session.code, 7, trusted.stdout);
    assert.match(session.out, /HELLO OVER TLS/);
    const badToken = await run({ SERVICE_TOKEN: "bt_not_a_token", NODE_EXTRA_CA_CERTS: join(dir, "ca.pem") });
    assert.deepEqual(JSON.parse(badToken.stdout.trim()), { error: "unauthenticated" }, badToken.stderr);
  });

  test("tls with a missing half, an unreadable file or a key of another certificate is refused, naming it", async () => {
    const base = { nats: { url: "nats://x:4222" }, agentNats: { password: "pw" } };
    assert.throws(
      () => resolveCoordinatorOptions({ ...base, tls: { certFile } as never }),
      /tls\.keyFile \(--tls-key\).*missing/,
    );
    assert.throws(
      () => resolveCoordinatorOptions({ ...base, tls: { keyFile } as never }),
      /tls\.certFile \(--tls-cert\).*missing/,
    );
    const missing = join(dir, "nope.pem");
    assert.throws(
      () => loadTlsCredentials({ certFile: missing, keyFile }),
      new RegExp(`certificate file ${missing}`),
    );
    assert.throws(
      () => loadTlsCredentials({ certFile: keyFile, keyFile }),
      new RegExp(`${keyFile} holds no PEM certificate`),
    );
    assert.throws(
      () => loadTlsCredentials({ certFile, keyFile: certFile }),
      new RegExp(`${certFile} holds no`),
    );
    assert.throws(
      () => loadTlsCredentials({ certFile, keyFile: otherKeyFile }),
      new RegExp(`key file ${otherKeyFile} is not the key of the certificate in ${certFile}`),
    );
    await assert.rejects(
      startCoordinator(
        resolveCoordinatorOptions({
          ...base,
          dataDir: join(dir, "never"),
          tls: { certFile, keyFile: otherKeyFile },
        }),
        pino({ level: "silent" }),
      ),
      (e: Error) => e instanceof StartupError && e.message.includes(otherKeyFile),
    );
  });

  test("berth coordinator --tls-cert without --tls-key exits with one line naming the missing key", async () => {
    const config = join(dir, "coordinator.json");
    writeFileSync(config, JSON.stringify({ nats: { url: nats.url }, agentNats: { password: "pw" } }));
    const r = await runNode(
      [CLI_BIN, "coordinator", "--config", config, "--tls-cert", certFile],
      cleanEnv(dir, {}),
    );
    assert.equal(r.code, 1);
    assert.match(r.stderr.trim(), /^berth coordinator: .*--tls-key.*missing$/);
  });
});
