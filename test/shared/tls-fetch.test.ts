// fetchTrusting against a real HTTPS server whose certificate the cluster CA
// issued (as berth up --advertise serves): answers, streamed bodies both
// ways, bodiless statuses, redirects, and a server of another CA refused;
// the CA fingerprint as berth up prints it and --ca-fingerprint takes it.

import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createServer } from "node:https";
import type { AddressInfo } from "node:net";
import { describe, test } from "node:test";
import { ClusterPki } from "../../coordinator/pki/index.ts";
import { caFingerprint, fetchTrusting, parseCaFingerprint } from "../../shared/tls-fetch.ts";
import { memoryStore } from "../helpers/store.ts";

async function serve(
  t: { after: (fn: () => unknown) => void },
  pki: ClusterPki,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<string> {
  const cert = await pki.issueServerCert("berth-up", { dnsNames: ["localhost"], ipAddresses: ["127.0.0.1"] });
  const server = createServer({ cert: cert.certPem, key: cert.keyPem }, handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

const readBody = async (req: IncomingMessage) => {
  const parts: Buffer[] = [];
  for await (const p of req) parts.push(p as Buffer);
  return Buffer.concat(parts).toString();
};

describe("fetch over the cluster CA", () => {
  test("answers, streamed bodies, bodiless statuses and redirects", async (t) => {
    const pki = await ClusterPki.load(memoryStore());
    const base = await serve(t, pki, async (req, res) => {
      if (req.url === "/json") {
        res.setHeader("content-type", "application/json");
        res.setHeader("www-authenticate", 'Basic realm="berth-cluster"');
        res.end(JSON.stringify({ method: req.method, auth: req.headers.authorization ?? null }));
      } else if (req.url === "/echo") {
        res.statusCode = 201;
        res.end(`${req.method} ${await readBody(req)}`);
      } else if (req.url === "/empty") {
        res.statusCode = 204;
        res.end();
      } else if (req.url === "/moved") {
        res.statusCode = 307;
        res.setHeader("location", "/json");
        res.end();
      } else {
        res.statusCode = 404;
        res.end("no such path");
      }
    });
    const f = fetchTrusting(pki.caPem);

    const json = await f(`${base}/json`, { headers: { authorization: "Basic eA==" } });
    assert.equal(json.status, 200);
    assert.equal(json.headers.get("www-authenticate"), 'Basic realm="berth-cluster"');
    assert.deepEqual(await json.json(), { method: "GET", auth: "Basic eA==" });

    const text = await f(`${base}/echo`, { method: "PUT", body: "layer bytes" });
    assert.equal(text.status, 201);
    assert.equal(await text.text(), "PUT layer bytes");

    const streamed = await f(`${base}/echo`, {
      method: "PATCH",
      body: new ReadableStream({
        start(c) {
          c.enqueue(new TextEncoder().encode("one "));
          c.enqueue(new TextEncoder().encode("two"));
          c.close();
        },
      }),
      duplex: "half",
    } as RequestInit);
    assert.equal(await streamed.text(), "PATCH one two");

    const empty = await f(`${base}/empty`, { method: "DELETE" });
    assert.equal(empty.status, 204);
    assert.equal(empty.body, null);

    const head = await f(`${base}/json`, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(head.body, null);

    const moved = await f(`${base}/moved`);
    assert.equal(moved.status, 200);
    assert.equal(((await moved.json()) as { method: string }).method, "GET");

    const missing = await f(`${base}/nothing`);
    assert.equal(missing.status, 404);
    assert.equal(await missing.text(), "no such path");
  });

  test("a server of another CA, or without the CA given, is refused like fetch refuses", async (t) => {
    const ours = await ClusterPki.load(memoryStore());
    const theirs = await ClusterPki.load(memoryStore());
    const base = await serve(t, theirs, (_req, res) => res.end("ok"));
    for (const f of [fetchTrusting(ours.caPem), fetchTrusting(undefined)]) {
      await assert.rejects(f(`${base}/`), (e: Error & { cause?: { code?: string } }) => {
        assert.equal(e.name, "TypeError");
        assert.match(String(e.cause?.code ?? e.cause), /SELF_SIGNED|UNABLE_TO_VERIFY|CERT/);
        return true;
      });
    }
    assert.equal(await (await fetchTrusting(theirs.caPem)(`${base}/`)).text(), "ok");
  });

  test("the fingerprint is the CA's SHA-256, and --ca-fingerprint takes each way it is written", async () => {
    const pki = await ClusterPki.load(memoryStore());
    const fp = caFingerprint(pki.caPem);
    const colons = new X509Certificate(pki.caPem).fingerprint256;
    assert.equal(fp, `sha256:${colons.replaceAll(":", "").toLowerCase()}`);
    assert.equal(parseCaFingerprint(fp), fp);
    assert.equal(parseCaFingerprint(colons), fp);
    assert.equal(parseCaFingerprint(fp.toUpperCase().replace("SHA256:", "sha256:")), fp);
    assert.throws(() => parseCaFingerprint("sha256:abc"), /must be sha256: and 64 hex digits/);
  });
});
