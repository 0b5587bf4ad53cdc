// The raw route table (coordinator/http/raw-routes.ts) on a server made by the
// edge's data plane (coordinator/edge/data-plane.ts): the first route that
// takes a request or an upgrade serves it, an upgrade none takes gets exactly
// one 404, and routes come and go without adding listeners to the server.

import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { test, type TestContext } from "node:test";
import pino from "pino";
import { dataPlaneServer } from "../../coordinator/edge/data-plane.ts";
import { addUpgradeRoute, type RawRoute, rawRoutesOf } from "../../coordinator/http/raw-routes.ts";

/** A route that takes the upgrade paths in `paths` and answers with its name. */
function named(name: string, paths: string[], taken: string[]): RawRoute {
  return {
    name,
    takeHttp(req, res) {
      if (!paths.includes(req.url ?? "")) return false;
      taken.push(`${name} http ${req.url}`);
      res.end(name);
      return true;
    },
    takeUpgrade(req, socket) {
      if (!paths.includes(req.url ?? "")) return false;
      taken.push(`${name} upgrade ${req.url}`);
      socket.end(`HTTP/1.1 200 OK\r\ncontent-length: ${name.length}\r\nconnection: close\r\n\r\n${name}`);
      return true;
    },
  };
}

async function serve(t: TestContext, routes: RawRoute[]): Promise<{ server: Server; port: number }> {
  const log = pino({ level: "silent" });
  const server = dataPlaneServer(createServer, routes, log)((_req, res) => res.end("fastify"));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { server, port: (server.address() as AddressInfo).port };
}

/** Sends an upgrade request and reads everything until the server closes the connection. */
async function upgrade(port: number, path: string): Promise<string> {
  const s = connect(port, "127.0.0.1");
  await once(s, "connect");
  s.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`);
  let text = "";
  s.on("data", (c: Buffer) => {
    text += c.toString();
  });
  await once(s, "close");
  return text;
}

const answers = (text: string) => text.match(/HTTP\/1\.1 \d{3}/g) ?? [];

test("an upgrade goes to the first route that takes it; one no route takes gets exactly one 404", async (t) => {
  const taken: string[] = [];
  const { port } = await serve(t, [
    named("first", ["/both", "/a"], taken),
    named("second", ["/both", "/b"], taken),
  ]);

  assert.match(await upgrade(port, "/both"), /first$/);
  assert.match(await upgrade(port, "/b"), /second$/);
  assert.deepEqual(taken, ["first upgrade /both", "second upgrade /b"], "the second never saw /both");

  const none = await upgrade(port, "/nowhere");
  assert.deepEqual(answers(none), ["HTTP/1.1 404"], `one answer: ${none}`);
  const body = JSON.parse(none.slice(none.indexOf("\r\n\r\n") + 4)) as {
    error: { code: string; message: string };
  };
  assert.equal(body.error.code, "route_not_found");
  assert.match(body.error.message, /\/nowhere/);
});

test("plain requests: the first route that takes one answers it, the rest go on to Fastify", async (t) => {
  const taken: string[] = [];
  const { port } = await serve(t, [named("first", ["/a"], taken), named("second", ["/a", "/b"], taken)]);
  const text = async (path: string) => (await fetch(`http://127.0.0.1:${port}${path}`)).text();
  assert.equal(await text("/a"), "first");
  assert.equal(await text("/b"), "second");
  assert.equal(await text("/elsewhere"), "fastify");
  assert.deepEqual(taken, ["first http /a", "second http /b"]);
});

test("a route that throws instead of answering is answered once, masked", async (t) => {
  const boom: RawRoute = {
    name: "boom",
    takeUpgrade() {
      throw new TypeError("s3cret detail");
    },
  };
  const { port } = await serve(t, [boom, named("after", ["/x"], [])]);
  const text = await upgrade(port, "/x");
  assert.deepEqual(answers(text), ["HTTP/1.1 500"]);
  assert.doesNotMatch(text, /s3cret/);
  assert.match(text, /under id err-[0-9a-f]+/);
});

test("routes come and go without a listener more on the server; a route leaving is closed", async (t) => {
  const { server, port } = await serve(t, [named("base", ["/base"], [])]);
  assert.equal(server.listenerCount("upgrade"), 1);
  let closed = 0;
  const detaches: (() => void)[] = [];
  for (let i = 0; i < 20; i++) {
    const route = { ...named(`r${i}`, [`/r${i}`], []), close: () => void closed++ };
    detaches.push(addUpgradeRoute(server, route));
  }
  assert.equal(server.listenerCount("upgrade"), 1, "one listener, whatever the number of routes");
  assert.equal(rawRoutesOf(server).names().length, 21);
  assert.match(await upgrade(port, "/r7"), /r7$/);
  for (const d of detaches) d();
  for (const d of detaches) d();
  assert.equal(closed, 20, "each route closed once");
  assert.deepEqual(rawRoutesOf(server).names(), ["base"]);
  assert.equal(server.listenerCount("upgrade"), 1);
  assert.deepEqual(answers(await upgrade(port, "/r7")), ["HTTP/1.1 404"]);
});
