import { createHash, createHmac } from "node:crypto";
import { BerthError } from "../../shared/errors.ts";
import type { AwsEcrKeys, BasicRegistryCredentials } from "./credentials.ts";
import type { EcrLogin } from "./options.ts";

const sha256Hex = (s: string) => createHash("sha256").update(s).digest("hex");
const hmac = (key: Buffer | string, s: string) => createHmac("sha256", key).update(s).digest();

export interface SigV4Request {
  method: string;
  host: string;
  path: string;
  /** Already in canonical form (sorted, encoded), without "?". */
  query: string;
  headers: Record<string, string>;
  body: string;
}

/**
 * AWS Signature Version 4 for one request: returns the Authorization header.
 * `headers` must hold every header to sign (host and x-amz-date included).
 */
export function signV4(
  req: SigV4Request,
  keys: { accessKeyId: string; secretAccessKey: string },
  scope: { region: string; service: string; amzDate: string },
): string {
  const names = Object.keys(req.headers)
    .map((h) => h.toLowerCase())
    .sort();
  const lower = Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k.toLowerCase(), v]));
  const canonicalHeaders = names
    .map((n) => `${n}:${String(lower[n]).trim().replace(/\s+/g, " ")}\n`)
    .join("");
  const signedHeaders = names.join(";");
  const canonicalRequest = [
    req.method,
    req.path,
    req.query,
    canonicalHeaders,
    signedHeaders,
    sha256Hex(req.body),
  ].join("\n");
  const date = scope.amzDate.slice(0, 8);
  const credentialScope = `${date}/${scope.region}/${scope.service}/aws4_request`;
  const stringToSign = ["AWS4-HMAC-SHA256", scope.amzDate, credentialScope, sha256Hex(canonicalRequest)].join(
    "\n",
  );
  const kDate = hmac(`AWS4${keys.secretAccessKey}`, date);
  const kSigning = hmac(hmac(hmac(kDate, scope.region), scope.service), "aws4_request");
  const signature = createHmac("sha256", kSigning).update(stringToSign).digest("hex");
  return `AWS4-HMAC-SHA256 Credential=${keys.accessKeyId}/${credentialScope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
}

export interface EcrLoginOptions {
  /** ECR API base URL for a region. @default https://api.ecr.<region>.amazonaws.com */
  endpoint?: (region: string) => string;
  /** @default 30_000 */
  timeoutMs?: number;
  /** @default () => new Date() */
  now?: () => Date;
}

/**
 * Exchanges AWS keys for an ECR password with ecr:GetAuthorizationToken
 * (JSON protocol, SigV4), which is what `aws ecr get-login-password` does.
 * Needs network access from the agent to the ECR API.
 */
export function sigV4EcrLogin(opts: EcrLoginOptions = {}): EcrLogin {
  const endpointFor = opts.endpoint ?? ((region: string) => `https://api.ecr.${region}.amazonaws.com`);
  return async (keys: AwsEcrKeys, registry: string): Promise<BasicRegistryCredentials> => {
    const url = new URL(endpointFor(keys.region));
    const amzDate = (opts.now?.() ?? new Date())
      .toISOString()
      .replace(/[-:]/g, "")
      .replace(/\.\d{3}/, "");
    const body = "{}";
    const headers: Record<string, string> = {
      "content-type": "application/x-amz-json-1.1",
      host: url.host,
      "x-amz-date": amzDate,
      "x-amz-target": "AmazonEC2ContainerRegistry_V20150921.GetAuthorizationToken",
    };
    if (keys.sessionToken) headers["x-amz-security-token"] = keys.sessionToken;
    const authorization = signV4(
      { method: "POST", host: url.host, path: url.pathname || "/", query: "", headers, body },
      keys,
      { region: keys.region, service: "ecr", amzDate },
    );
    let res: Response;
    try {
      const { host: _host, ...sent } = headers;
      res = await fetch(url, {
        method: "POST",
        headers: { ...sent, authorization },
        body,
        signal: AbortSignal.timeout(opts.timeoutMs ?? 30_000),
      });
    } catch (e) {
      throw new BerthError(
        "unavailable",
        `ECR API ${url.host} for ${registry} is not reachable: ${(e as Error).message}`,
      );
    }
    const text = await res.text();
    if (!res.ok) {
      const code = res.status === 400 || res.status === 403 ? "registry_auth_failed" : "unavailable";
      throw new BerthError(
        code,
        `ECR refused the AWS keys for ${registry} (HTTP ${res.status}): ${text.slice(0, 300)}`,
      );
    }
    const token = (JSON.parse(text) as { authorizationData?: Array<{ authorizationToken?: string }> })
      .authorizationData?.[0]?.authorizationToken;
    const decoded = token ? Buffer.from(token, "base64").toString("utf8") : "";
    const colon = decoded.indexOf(":");
    if (colon <= 0)
      throw new BerthError("unavailable", `ECR answered without an authorization token for ${registry}`);
    return {
      kind: "basic",
      username: decoded.slice(0, colon),
      password: decoded.slice(colon + 1),
      source: "aws-ecr-password",
    };
  };
}
