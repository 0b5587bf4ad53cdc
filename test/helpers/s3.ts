// An S3-compatible server on loopback for the cloud bucket tests: s3rver
// (npm) over a temp directory, with a key pair of the test's own, and a
// client that signs its requests with AWS Signature V4 as S3 clients do.
// The server is closed and its directory removed in t.after, pass or fail.

import { createHash, createHmac, randomBytes } from "node:crypto";
import { createRequire } from "node:module";
import { tempDir } from "./env.ts";

const require = createRequire(import.meta.url);

interface S3rverServer {
  run(): Promise<{ address: string; port: number }>;
  close(): Promise<void>;
}
// s3rver ships CommonJS without types.
const S3rver = require("s3rver") as new (o: Record<string, unknown>) => S3rverServer;
const { DUMMY_ACCOUNT } = require("s3rver/lib/models/account.js") as {
  DUMMY_ACCOUNT: { createKeyPair(id: string, secret: string): void; revokeAccessKey(id: string): void };
};

export interface TestS3 {
  /** http://127.0.0.1:PORT */
  endpoint: string;
  region: string;
  accessKey: string;
  secretKey: string;
  put(bucket: string, key: string, body: string | Buffer): Promise<void>;
  /** The object's status and body (404 when absent). */
  get(bucket: string, key: string): Promise<{ status: number; body: string }>;
}

const sha256 = (b: string | Buffer) => createHash("sha256").update(b).digest("hex");
const hmac = (k: string | Buffer, s: string) => createHmac("sha256", k).update(s).digest();

/** AWS Signature V4 headers for a request without a query string. */
export function signV4(
  o: { method: string; url: URL; body: Buffer; accessKey: string; secretKey: string; region: string },
  now = new Date(),
): Record<string, string> {
  const amzDate = now
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d{3}/, "");
  const day = amzDate.slice(0, 8);
  const payload = sha256(o.body);
  const headers: Record<string, string> = {
    host: o.url.host,
    "x-amz-content-sha256": payload,
    "x-amz-date": amzDate,
  };
  const names = Object.keys(headers).sort();
  const canonical = [
    o.method,
    o.url.pathname,
    "",
    ...names.map((n) => `${n}:${headers[n]}`),
    "",
    names.join(";"),
    payload,
  ].join("\n");
  const scope = `${day}/${o.region}/s3/aws4_request`;
  const toSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256(canonical)].join("\n");
  const key = hmac(hmac(hmac(hmac(`AWS4${o.secretKey}`, day), o.region), "s3"), "aws4_request");
  const signature = createHmac("sha256", key).update(toSign).digest("hex");
  return {
    ...headers,
    authorization: `AWS4-HMAC-SHA256 Credential=${o.accessKey}/${scope}, SignedHeaders=${names.join(";")}, Signature=${signature}`,
  };
}

/** Starts s3rver on 127.0.0.1 with `buckets` made and a fresh key pair. */
export async function startTestS3(
  t: { after: (fn: () => unknown) => void },
  buckets: string[],
): Promise<TestS3> {
  const accessKey = `BERTHTEST${randomBytes(6).toString("hex").toUpperCase()}`;
  const secretKey = randomBytes(20).toString("base64url");
  DUMMY_ACCOUNT.createKeyPair(accessKey, secretKey);
  t.after(() => DUMMY_ACCOUNT.revokeAccessKey(accessKey));
  const server = new S3rver({
    address: "127.0.0.1",
    port: 0,
    silent: true,
    directory: tempDir(t, "berth-s3-"),
    configureBuckets: buckets.map((name) => ({ name })),
  });
  const { port } = await server.run();
  t.after(() => server.close());
  const endpoint = `http://127.0.0.1:${port}`;
  const region = "us-east-1";
  const request = async (method: string, bucket: string, key: string, body = Buffer.alloc(0)) => {
    const url = new URL(`${endpoint}/${bucket}/${key}`);
    const headers = signV4({ method, url, body, accessKey, secretKey, region });
    return fetch(url, { method, headers, ...(body.length > 0 ? { body } : {}) });
  };
  return {
    endpoint,
    region,
    accessKey,
    secretKey,
    async put(bucket, key, body) {
      const res = await request("PUT", bucket, key, Buffer.from(body));
      if (!res.ok) throw new Error(`PUT ${bucket}/${key}: ${res.status} ${await res.text()}`);
    },
    async get(bucket, key) {
      const res = await request("GET", bucket, key);
      return { status: res.status, body: await res.text() };
    },
  };
}
