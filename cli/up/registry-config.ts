// The config.yml of Debian's docker-registry (distribution v2) as berth runs it: loopback (or the
// address berth up --advertise names, over TLS),
// filesystem storage, deletes on (image GC deletes manifests), quiet logs, and htpasswd auth when
// given one. Shared by `berth up`'s cluster registry and the tests' registries, so both run the
// registry the same way.

export interface RegistryConfig {
  port: number;
  /** The address it listens on. @default 127.0.0.1 */
  host?: string;
  /** Serve HTTPS with this PEM certificate and key (berth up --advertise). @default plain HTTP */
  tls?: { certFile: string; keyFile: string };
  /** Where blobs and manifests live. */
  dataDir: string;
  /** An htpasswd file (bcrypt; the only hash distribution accepts) and the realm it answers with. */
  htpasswd?: { path: string; realm: string };
}

export function registryConfigYaml(c: RegistryConfig): string {
  const lines = [
    "version: 0.1",
    "log:",
    "  level: warn",
    "  accesslog:",
    "    disabled: true",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${c.dataDir}`,
    "  delete:",
    "    enabled: true",
    "http:",
    `  addr: ${hostPort(c.host ?? "127.0.0.1", c.port)}`,
    ...(c.tls ? ["  tls:", `    certificate: ${c.tls.certFile}`, `    key: ${c.tls.keyFile}`] : []),
  ];
  if (c.htpasswd)
    lines.push("auth:", "  htpasswd:", `    realm: ${c.htpasswd.realm}`, `    path: ${c.htpasswd.path}`);
  return `${lines.join("\n")}\n`;
}

const hostPort = (host: string, port: number) => `${host.includes(":") ? `[${host}]` : host}:${port}`;
