import assert from "node:assert/strict";
import { once } from "node:events";
import { existsSync } from "node:fs";
import { createServer, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { ImageStore, resolveRegistryCredentials, signV4, sigV4EcrLogin } from "../../agent/images/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";
import { imageFile } from "../helpers/image-layers.ts";

test("SigV4 matches AWS's documented example request", () => {
  // The IAM ListUsers example from the AWS "Signature Version 4" documentation.
  const auth = signV4(
    {
      method: "GET",
      host: "iam.amazonaws.com",
      path: "/",
      query: "Action=ListUsers&Version=2010-05-08",
      headers: {
        "Content-Type": "application/x-www-form-urlencoded; charset=utf-8",
        Host: "iam.amazonaws.com",
        "X-Amz-Date": "20150830T123600Z",
      },
      body: "",
    },
    { accessKeyId: "AKIDEXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY" },
    { region: "us-east-1", service: "iam", amzDate: "20150830T123600Z" },
  );
  assert.equal(
    auth,
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/iam/aws4_request, " +
      "SignedHeaders=content-type;host;x-amz-date, " +
      "Signature=5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7",
  );
});

interface SeenRequest {
  method: string;
  headers: IncomingMessage["headers"];
  body: string;
}

/** A loopback stand-in for the ECR API that checks the request and answers like ECR. */
async function fakeEcrApi(
  t: { after: (fn: () => unknown) => void },
  answer: { status: number; user?: string; pass?: string },
) {
  const seen: SeenRequest[] = [];
  const server = createServer((req, res) => {
    let body = "";
    req.on("data", (c: Buffer) => {
      body += c.toString();
    });
    req.on("end", () => {
      seen.push({ method: req.method ?? "", headers: req.headers, body });
      res.writeHead(answer.status, { "content-type": "application/x-amz-json-1.1" });
      if (answer.status !== 200) {
        res.end(
          JSON.stringify({
            __type: "UnrecognizedClientException",
            message: "The security token is invalid.",
          }),
        );
        return;
      }
      const token = Buffer.from(`${answer.user}:${answer.pass}`).toString("base64");
      res.end(
        JSON.stringify({ authorizationData: [{ authorizationToken: token, proxyEndpoint: "https://x" }] }),
      );
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  const port = (server.address() as AddressInfo).port;
  return { seen, endpoint: () => `http://127.0.0.1:${port}` };
}

const KEYS = {
  AWS_ACCESS_KEY_ID: "AKIDEXAMPLE",
  AWS_SECRET_ACCESS_KEY: "secret/KEY",
  AWS_REGION: "eu-west-1",
};

test("the ECR exchange sends a signed GetAuthorizationToken and decodes the token", async (t) => {
  const api = await fakeEcrApi(t, { status: 200, user: "AWS", pass: "ecr-password-1" });
  const login = sigV4EcrLogin({ endpoint: api.endpoint, now: () => new Date("2026-01-02T03:04:05Z") });
  const keys = resolveRegistryCredentials({ ...KEYS, AWS_SESSION_TOKEN: "sess" }, {});
  assert.equal(keys?.kind, "aws-ecr");
  if (keys?.kind !== "aws-ecr") return;
  const creds = await login(keys, "123456789012.dkr.ecr.eu-west-1.amazonaws.com");
  assert.deepEqual(creds, {
    kind: "basic",
    username: "AWS",
    password: "ecr-password-1",
    source: "aws-ecr-password",
  });
  const req = api.seen[0]!;
  assert.equal(req.method, "POST");
  assert.equal(req.body, "{}");
  assert.equal(req.headers["x-amz-target"], "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken");
  assert.equal(req.headers["x-amz-date"], "20260102T030405Z");
  assert.equal(req.headers["x-amz-security-token"], "sess");
  assert.match(
    String(req.headers.authorization),
    /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/20260102\/eu-west-1\/ecr\/aws4_request, SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, Signature=[0-9a-f]{64}$/,
  );
});

test("ECR refusing the keys is an auth error without the secret in it", async (t) => {
  const api = await fakeEcrApi(t, { status: 400 });
  const login = sigV4EcrLogin({ endpoint: api.endpoint });
  const keys = resolveRegistryCredentials(KEYS, {});
  if (keys?.kind !== "aws-ecr") throw new Error("expected ECR keys");
  await assert.rejects(
    login(keys, "r.example"),
    (e: unknown) =>
      e instanceof BerthError &&
      e.code === "registry_auth_failed" &&
      e.message.includes("r.example") &&
      !e.message.includes("secret/KEY"),
  );
});

test("a pull with AWS keys logs in through the exchange", { timeout: 5 * 60_000 }, async (t) => {
  if (!needs(t, { root: true, commands: ["skopeo", "umoci", "docker-registry"] })) return;
  const registry = await startTestRegistry(t, { auth: { user: "AWS", password: "from-ecr" } });
  const ref = await pushTestImage(registry, "ecr/python", "bookworm");
  const api = await fakeEcrApi(t, { status: 200, user: "AWS", pass: "from-ecr" });
  const store = new ImageStore({
    root: tempDir(t, "berth-images-"),
    ecrLogin: sigV4EcrLogin({ endpoint: api.endpoint }),
  });
  const info = await store.pull(ref, { credentials: resolveRegistryCredentials(Object.keys(KEYS), KEYS)! });
  assert.ok(existsSync(imageFile(info, "usr/bin/python3")));
  assert.equal(api.seen.length, 1);
});
