// Public URLs of exposed container ports (docs/sandboxes.md, Exposed ports).
// The port proxy (coordinator/ports/) serves them; sandboxes and pods hand them out.

/** `{publicUrl}/port/{containerId}/{port}/`, or `{scheme}://{containerId}-{port}.{endpointDomain}/` with a domain. */
export function portUrl(
  publicUrl: string,
  endpointDomain: string | undefined,
  containerId: string,
  port: number,
): string {
  const u = new URL(publicUrl);
  if (endpointDomain)
    return `${u.protocol}//${containerId}-${port}.${endpointDomain}${u.port ? `:${u.port}` : ""}/`;
  return `${publicUrl.replace(/\/+$/, "")}/port/${containerId}/${port}/`;
}

/** Port URLs by port, as list_urls answers them. */
export function portUrls(
  publicUrl: string,
  endpointDomain: string | undefined,
  containerId: string,
  ports: Iterable<number>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of ports) out[String(p)] = portUrl(publicUrl, endpointDomain, containerId, p);
  return out;
}
