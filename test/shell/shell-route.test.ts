// The shell websocket route over raw sockets, with a fake exec: a peer that
// goes away without a close frame (FIN only) still ends the session, so the
// shell's exec is killed; a handshake `ws` would refuse is refused before the
// exec starts, in berth's error shape. (Upgraded sockets of a node:http
// server are half-open capable: a FIN alone never emits "close" on them.)

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { test, type TestContext } from "node:test";
import pino from "pino";
import { attachShellUpgrades, type ShellDeps } from "../../coordinator/edge/shell.ts";
import { Store } from "../../coordinator/records.ts";
import { tempDir } from "../helpers/env.ts";
import { bearer } from "../helpers/auth.ts";

type ExecSession = Awaited<ReturnType<ReturnType<ShellDeps["agents"]["client"]>["exec"]>>;

/** An exec that prints nothing and runs until killed. */
function idleSession(): { session: ExecSession; killed: Promise<string | undefined> } {
  let onKill: (signal: string | undefined) => void = () => {};
  const killed = new Promise<string | undefined>((r) => {
    onKill = r;
  });
  let finish: (code: number) => void = () => {};
  const exit = new Promise<number>((r) => {
    finish = r;
  });
  const session: ExecSession = {
    // Ends (with no output) once the exec exits.
    output: {
      [Symbol.asyncIterator]: () => ({
        next: async () => {
          await exit;
          return { done: true as const, value: undefined };
        },
      }),
    },
    writeStdin() {},
    closeStdin() {},
    resize() {},
    kill(signal) {
      onKill(signal);
      finish(137);
    },
    exit,
  };
  return { session, killed };
}

async function world(t: TestContext) {
  const store = await Store.open(`sqlite:${tempDir(t)}/b.db`);
  t.after(() => store.close());
  const ws = await store.workspaces.create("main");
  const token = (await store.tokens.create(ws.id)).secret;
  const execs: ReturnType<typeof idleSession>[] = [];
  const http = createServer((_req, res) => res.writeHead(404).end());
  attachShellUpgrades(http, {
    tokens: store.tokens,
    targets: [
      { find: async (id) => (id === "ctr-a" ? { agentId: "agent-1", workspaceId: ws.id } : undefined) },
    ],
    agents: {
      client: () => ({
        exec: async () => {
          const e = idleSession();
          execs.push(e);
          return e.session;
        },
      }),
    },
    log: pino({ level: "silent" }),
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  t.after(() => {
    http.closeAllConnections();
    return new Promise<void>((r) => http.close(() => r()));
  });
  const { port } = http.address() as AddressInfo;
  /** A raw connection that sent the handshake; `first` is the start of the answer. */
  const open = async (headers: Record<string, string>) => {
    const socket = connect(port, "127.0.0.1");
    socket.on("error", () => {});
    const lines = Object.entries({ host: "x", ...bearer(token), ...headers }).map(
      ([k, v]) => `${k}: ${v}\r\n`,
    );
    socket.write(`GET /api/v1/container/${ws.externalId}/ctr-a/shell HTTP/1.1\r\n${lines.join("")}\r\n`);
    let answer = "";
    await new Promise<void>((r) =>
      socket.on("data", (c: Buffer) => {
        answer += c.toString("latin1");
        if (answer.includes("\r\n\r\n")) r();
      }),
    );
    return { socket, answer: () => answer };
  };
  return { execs, open };
}

const HANDSHAKE = {
  connection: "Upgrade",
  upgrade: "websocket",
  "sec-websocket-version": "13",
  "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
};

test("a peer's FIN without a close frame ends the session: the exec is killed", {
  timeout: 30_000,
}, async (t) => {
  const w = await world(t);
  const { socket, answer } = await w.open(HANDSHAKE);
  assert.match(answer(), /^HTTP\/1\.1 101 /);
  assert.match(answer(), /sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK\+xOo=\r\n/i);
  assert.equal(w.execs.length, 1);
  socket.end();
  assert.equal(await w.execs[0]?.killed, "SIGKILL");
  socket.destroy();
});

test("a handshake ws would refuse is refused in berth's shape before any exec", {
  timeout: 30_000,
}, async (t) => {
  const w = await world(t);
  const cases: Record<string, string>[] = [
    { ...HANDSHAKE, "sec-websocket-version": "" },
    { ...HANDSHAKE, "sec-websocket-key": "not-a-key" },
    { ...HANDSHAKE, upgrade: "h2c" },
  ];
  for (const headers of cases) {
    const { socket, answer } = await w.open(headers);
    assert.match(answer(), /^HTTP\/1\.1 400 /, JSON.stringify(headers));
    await new Promise<void>((r) => (socket.readableEnded ? r() : socket.on("end", () => r())));
    const body = JSON.parse(answer().slice(answer().indexOf("\r\n\r\n") + 4));
    assert.equal(body.error.code, "invalid_request", JSON.stringify(body));
    assert.match(body.error.message, /takes a websocket/);
    socket.destroy();
  }
  assert.equal(w.execs.length, 0);
});
