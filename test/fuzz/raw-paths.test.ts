// The route fuzzer's second half: the paths the coordinator serves before
// Fastify or outside it — /endpoint/..., /port/..., and the websocket
// upgrades of endpoints, exposed ports and the container shell — driven
// over real sockets (raw bytes, so malformed request lines and headers
// reach the server as a hostile client sends them). Same checks as
// routes.test.ts: no 5xx, no insides, the catalog's shape, nothing of the
// other workspace; and the server still answers afterwards.

import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, test } from "node:test";
import { attachEndpointUpgrades } from "../../coordinator/endpoints/websocket.ts";
import { attachPortUpgrades } from "../../coordinator/ports/proxy.ts";
import { problemsOf, sentValues } from "./checks.ts";
import { type FuzzFixture, startFuzzFixture } from "./fixture.ts";
import { ODD_SEGMENTS, oddAuthorization, Rng } from "./inputs.ts";
import type { FuzzAnswer } from "./send.ts";

const SEED = Number(process.env.BERTH_FUZZ_SEED ?? 0x18f022);
const REQUESTS = Number(process.env.BERTH_FUZZ_RAW_REQUESTS ?? 600);
/** A safety net, not a timing assertion: an exchange with no end is reported, not waited for. */
const NO_ANSWER_MS = 60_000;

/** One raw exchange: `head` (request line and headers, CRLF-separated, without the blank line) and a body. */
function exchange(port: number, head: string, body = ""): Promise<FuzzAnswer & { upgraded: boolean }> {
  return new Promise((resolve) => {
    const s = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    let done = false;
    const finish = (why?: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      s.destroy();
      const text = Buffer.concat(chunks).toString("latin1");
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
      const at = text.indexOf("\r\n\r\n");
      const headers = at >= 0 ? text.slice(0, at) : text;
      const contentType = /\r\ncontent-type: ([^\r]*)/i.exec(headers)?.[1] ?? "";
      resolve({
        status: why ? -1 : status,
        contentType,
        body: why ?? (at >= 0 ? text.slice(at + 4) : ""),
        streamed: false,
        upgraded: status === 101,
      });
    };
    const timer = setTimeout(() => finish(`no answer in ${NO_ANSWER_MS} ms`), NO_ANSWER_MS);
    s.on("data", (c: Buffer) => {
      chunks.push(c);
      // A websocket began: close it as a client does (a masked close frame), then stop reading.
      const text = Buffer.concat(chunks).toString("latin1");
      if (/^HTTP\/1\.1 101/.test(text)) {
        s.write(Buffer.from([0x88, 0x80, 0, 0, 0, 0]));
        finish();
        return;
      }
      // A complete answer (its Content-Length read, or none to read): the exchange is over.
      const at = text.indexOf("\r\n\r\n");
      if (at < 0) return;
      const length = /\r\ncontent-length: (\d+)/i.exec(text.slice(0, at))?.[1];
      const bodyless = /^HEAD /.test(head) || /^HTTP\/1\.1 (204|304)/.test(text);
      if (
        bodyless ||
        (length !== undefined && Buffer.byteLength(text.slice(at + 4), "latin1") >= Number(length))
      )
        finish();
    });
    s.on("end", () => finish());
    s.on("error", () => finish());
    // Written, not ended: a half-closed request is a client gone, and some paths rightly stop there.
    s.on("connect", () => s.write(`${head}\r\n\r\n${body}`));
  });
}

describe("route fuzzer: raw paths, exposed ports and websocket upgrades", () => {
  let fz: FuzzFixture;
  let port: number;
  const cleanups: (() => unknown)[] = [];
  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });
  before(async () => {
    fz = await startFuzzFixture({ after: (fn) => cleanups.push(fn) });
    const app = fz.f.x.app;
    attachEndpointUpgrades(app.server, fz.endpoints);
    attachPortUpgrades(app.server, fz.f.ports);
    port = Number((await fz.f.listen()).split(":")[1]);
  });

  test(`${REQUESTS} hostile requests and upgrades: no 5xx, no insides, no leak, the server still answers`, async (t) => {
    const rng = new Rng(SEED);
    t.diagnostic(`seed ${SEED}, ${REQUESTS} raw exchanges`);

    const problems: string[] = [];
    const statuses = new Map<number, number>();
    const targets = (side: "a" | "b") => {
      const v = fz.values[side];
      return [
        `/endpoint/${v.deploymentName}`,
        `/endpoint/id/${v.id}`,
        `/endpoint/${v.deploymentName}/v1`,
        `/port/${side === "a" ? fz.f.podId : "ctr-000000000000"}/${fz.f.podPort}/`,
        `/port/${v.sandboxId}/8000/x`,
        `/api/v1/container/${v.ws}/${v.sandboxId}/shell?cols=80&rows=24`,
        `/api/v1/container/${v.ws}/${v.containerId}/shell`,
      ];
    };
    const oddPath = (p: string) => {
      const parts = p.split("/");
      const i = 2 + rng.int(Math.max(1, parts.length - 2));
      parts[i] = rng.pick(ODD_SEGMENTS);
      return parts.join("/");
    };
    const upgradeHeaders = () =>
      rng.pick([
        [
          "Connection: Upgrade",
          "Upgrade: websocket",
          "Sec-WebSocket-Version: 13",
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        ],
        ["Connection: Upgrade", "Upgrade: websocket"],
        ["Connection: Upgrade", "Upgrade: websocket", "Sec-WebSocket-Version: 99", "Sec-WebSocket-Key: x"],
        ["Connection: Upgrade", "Upgrade: h2c"],
        [
          "Connection: keep-alive, Upgrade",
          "Upgrade: WebSocket",
          "Sec-WebSocket-Version: 13",
          "Sec-WebSocket-Key: ===",
        ],
        ["Upgrade: websocket"],
        ["Connection: Upgrade", `Upgrade: ${"w".repeat(4000)}`],
      ]);
    for (let i = 0; i < REQUESTS; i++) {
      const side = rng.next() < 0.5 ? ("a" as const) : ("b" as const);
      const cross = rng.next() < 0.3;
      let path = rng.pick(targets(cross ? (side === "a" ? "b" : "a") : side));
      if (rng.next() < 0.4) path = oddPath(path);
      const token = fz.tokens[side];
      const auth = rng.next() < 0.2 ? oddAuthorization(rng, token) : `Bearer ${token}`;
      const method = rng.pick(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]);
      const upgrade = rng.next() < 0.4;
      const body =
        method === "POST" || method === "PUT" ? rng.pick(["{}", "{", '{"a":1}', "x".repeat(10_000), ""]) : "";
      const head = [
        `${upgrade ? "GET" : method} ${path} HTTP/1.1`,
        "Host: 127.0.0.1",
        ...(auth !== undefined ? [`Authorization: ${auth}`] : []),
        ...(upgrade ? upgradeHeaders() : []),
        ...(body && !upgrade
          ? ["Content-Type: application/json", `Content-Length: ${Buffer.byteLength(body)}`]
          : []),
        "Connection: close",
      ]
        .filter((h) => !(upgrade && h === "Connection: close"))
        .join("\r\n");
      const r = await exchange(port, head, upgrade ? "" : body);
      statuses.set(r.status, (statuses.get(r.status) ?? 0) + 1);
      const what = `${upgrade ? "upgrade " : ""}${method} ${path.slice(0, 160)} (${side}${cross ? " → other's" : ""})`;
      if (r.status === -1) problems.push(`${what}: ${r.body}`);
      // A sandbox's port URL is a capability (no token; docs/sandboxes.md), and the fixture's one stand-in
      // upstream answers for every container: only the authorized pod's port and the other paths are scoped.
      const scoped = !/^\/port\/ctr-[0-9a-f]+\/8000\//.test(path);
      for (const p of problemsOf(r, {
        ...(scoped ? { foreignMarker: fz.markers[side === "a" ? "b" : "a"] } : {}),
        sent: sentValues(path, body),
        method: upgrade ? "GET" : method,
      }))
        problems.push(`${what}: ${p} → ${r.status} ${r.body.slice(0, 200)}`);
      if (r.status === 0) problems.push(`${what}: closed without an answer`);
      if (
        scoped &&
        cross &&
        r.status >= 200 &&
        r.status < 300 &&
        !path.includes("%") &&
        auth === `Bearer ${token}`
      )
        problems.push(`${what}: the other workspace's target answered ${r.status} ${r.body.slice(0, 200)}`);
      if (scoped && cross && r.upgraded)
        problems.push(`${what}: a websocket to the other workspace's target opened`);
    }
    const health = await exchange(port, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close");
    t.diagnostic(`statuses ${JSON.stringify(Object.fromEntries([...statuses].sort((x, y) => x[0] - y[0])))}`);
    assert.deepEqual(problems.slice(0, 40), [], `${problems.length} problems`);
    assert.equal(health.status, 200, "the server still answers");
    // The fuzzed paths did reach what they aim at: A's own pod answered through the proxy, and some upgrade opened.
    assert.ok((statuses.get(101) ?? 0) > 0, "some upgrade was accepted (the control)");
  });
});
