import assert from "node:assert/strict";
import { createServer, request } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { resolveCoordinatorOptions } from "../../coordinator/options.ts";
import {
  attachEndpointHostRewrite,
  endpointUrlForHost,
  hostUrl,
} from "../../coordinator/endpoints/host-names.ts";
import { perSuite } from "../helpers/suite.ts";
import { startEndpointHarness } from "./harness.ts";
import { bearer } from "../helpers/auth.ts";

test("a deployment's host name stands for /endpoint/id/{id}; other hosts are left alone", () => {
  const d = "apps.example.com";
  assert.equal(endpointUrlForHost(d, "dep-9x2k.apps.example.com", "/"), "/endpoint/id/dep-9x2k/");
  assert.equal(
    endpointUrlForHost(d, "DEP-9X2K.Apps.Example.com:8420", "/a/b?c=1"),
    "/endpoint/id/dep-9x2k/a/b?c=1",
  );
  assert.equal(endpointUrlForHost(d, "dep-9x2k.apps.example.com.", "/x"), "/endpoint/id/dep-9x2k/x");
  assert.equal(endpointUrlForHost(d, "apps.example.com", "/"), undefined);
  assert.equal(endpointUrlForHost(d, "www.apps.example.com", "/"), undefined, "only deployment ids");
  assert.equal(endpointUrlForHost(d, "a.dep-9x2k.apps.example.com", "/"), undefined);
  assert.equal(endpointUrlForHost(d, "dep-9x2k.evil-apps.example.com", "/"), undefined);
  assert.equal(endpointUrlForHost(d, undefined, "/"), undefined);
  assert.equal(hostUrl("https://berth.example.com:8443", d, "dep-1"), "https://dep-1.apps.example.com:8443");
  assert.equal(hostUrl("http://127.0.0.1", d, "dep-1"), "http://dep-1.apps.example.com");
});

test("the coordinator option endpointDomain is a DNS name", () => {
  const base = { nats: { url: "nats://127.0.0.1:4222" }, agentNats: { password: "pw" } };
  assert.equal(
    resolveCoordinatorOptions({ ...base, endpointDomain: "Apps.Example.com." }).endpointDomain,
    "apps.example.com",
  );
  assert.equal(resolveCoordinatorOptions(base).endpointDomain, undefined);
  for (const bad of ["", "a b.com", "-x.com", "x..com", "http://x.com"])
    assert.throws(() => resolveCoordinatorOptions({ ...base, endpointDomain: bad }), /endpointDomain/);
});

test("websocket upgrades are rewritten before any other upgrade listener runs", async (t) => {
  const server = createServer();
  const seen: string[] = [];
  server.on("upgrade", (req, socket) => {
    seen.push(req.url ?? "");
    socket.end("HTTP/1.1 400 Bad Request\r\n\r\n");
  });
  attachEndpointHostRewrite(server, "apps.test");
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  const port = (server.address() as AddressInfo).port;
  await new Promise<void>((resolve) => {
    const req = request({
      port,
      host: "127.0.0.1",
      path: "/chat",
      headers: { host: "dep-abc.apps.test", connection: "Upgrade", upgrade: "websocket" },
    });
    req.on("response", () => resolve());
    req.on("upgrade", () => resolve());
    req.on("error", () => resolve());
    req.end();
  });
  assert.deepEqual(seen, ["/endpoint/id/dep-abc/chat"]);
});

describe("per-deployment host names through the coordinator's HTTP app", () => {
  const e = perSuite((suite) => startEndpointHarness(suite, { endpointDomain: "apps.test" }));

  const post = (host: string, path: string, body: string) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const u = new URL(e.base);
      const req = request(
        {
          host: u.hostname,
          port: u.port,
          path,
          method: "POST",
          headers: { host, "content-type": "application/json", ...bearer(e.token) },
        },
        (res) => {
          let text = "";
          res.on("data", (c) => (text += c));
          res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text }));
        },
      );
      req.on("error", reject);
      req.end(body);
    });

  test("a request to {deployment_id}.{domain} reaches that deployment; the API stays on the plain host", async () => {
    const d = await e.deploy("hosted", "endpoint", {
      extra: { handler_params: { names: ["a"], required: [], var_keyword: false, context: false } },
    });
    await e.addContainer(d.stub.id, "ctr-hosted");
    const ok = await post(`${d.deployment.id}.apps.test`, "/", '{"a": 5}');
    assert.equal(ok.status, 200, ok.body);
    assert.deepEqual(JSON.parse(ok.body).got, { a: 5 });
    const unknown = await post("dep-nothere.apps.test", "/", "{}");
    assert.equal(unknown.status, 404);
    const api = await post("127.0.0.1", "/endpoint/hosted", '{"a": 6}');
    assert.equal(api.status, 200, "the path form keeps working");
  });
});
