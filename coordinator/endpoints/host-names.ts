// Per-deployment host names (docs/deployments.md, Invocation): a request to
// `{deployment_id}.{endpointDomain}` is served as `/endpoint/id/{deployment_id}`
// is. The URL is rewritten before routing, for plain requests (Fastify's
// rewriteUrl) and websocket upgrades alike, so one code path serves both.

import type { IncomingMessage } from "node:http";

const DEPLOYMENT_LABEL = /^dep-[0-9a-z]+$/;

/** The `/endpoint/id/...` URL a request to a deployment's host name stands for; undefined for other hosts. */
export function endpointUrlForHost(
  domain: string,
  host: string | undefined,
  url: string,
): string | undefined {
  if (!host) return undefined;
  const name = host.toLowerCase().replace(/:\d+$/, "").replace(/\.$/, "");
  const suffix = `.${domain}`;
  if (!name.endsWith(suffix)) return undefined;
  const label = name.slice(0, -suffix.length);
  if (!DEPLOYMENT_LABEL.test(label)) return undefined;
  return `/endpoint/id/${label}${url.startsWith("/") ? url : `/${url}`}`;
}

/** Rewrites req.url in place when its Host names a deployment; returns the URL to route. */
export function rewriteEndpointHost(domain: string, req: IncomingMessage): string {
  const rewritten = endpointUrlForHost(domain, req.headers.host, req.url ?? "/");
  if (rewritten) req.url = rewritten;
  return req.url ?? "/";
}

/** `http://dep-x.apps.example.com:8420` for a coordinator at `http://host:8420`. */
export function hostUrl(publicUrl: string, domain: string, deploymentId: string): string {
  const u = new URL(publicUrl);
  return `${u.protocol}//${deploymentId}.${domain}${u.port ? `:${u.port}` : ""}`;
}

/** Websocket upgrades bypass Fastify's rewriteUrl: rewrite them before the endpoint upgrade handler runs. */
export function attachEndpointHostRewrite(server: import("node:http").Server, domain: string): () => void {
  const rewrite = (req: IncomingMessage) => void rewriteEndpointHost(domain, req);
  server.prependListener("upgrade", rewrite);
  return () => server.off("upgrade", rewrite);
}
