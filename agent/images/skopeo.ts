import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { registryError } from "./commands.ts";
import type { BasicRegistryCredentials } from "./credentials.ts";
import type { ResolvedImageStoreOptions } from "./options.ts";
import { type ImageReference, isLoopbackRegistry } from "./reference.ts";

/** How to reach one registry for one operation. */
export interface RegistryAccess {
  ref: string;
  registry: string;
  insecure: boolean;
  /** containers-auth.json holding the credentials; argv would show them to every local user. */
  authFile?: string;
  /** Folder of the CA to trust for this registry (skopeo --cert-dir): the cluster registry's, when it has one. */
  certDir?: string;
  secrets: string[];
}

export function isInsecureRegistry(o: ResolvedImageStoreOptions, registry: string): boolean {
  return o.insecureRegistries.has(registry) || (o.allowLoopbackHttp && isLoopbackRegistry(registry));
}

/**
 * Runs `fn` with credentials in a private auth file (0600 in a 0700 dir),
 * removed afterwards whatever happens.
 */
export async function withRegistryAccess<T>(
  o: ResolvedImageStoreOptions,
  tmpRoot: string,
  ref: ImageReference,
  creds: BasicRegistryCredentials | undefined,
  fn: (access: RegistryAccess) => Promise<T>,
): Promise<T> {
  const cluster = o.clusterRegistry;
  const base = {
    ref: ref.canonical,
    registry: ref.registry,
    insecure: isInsecureRegistry(o, ref.registry),
    ...(cluster?.certDir && cluster.host === ref.registry ? { certDir: cluster.certDir } : {}),
  };
  if (!creds) return fn({ ...base, secrets: [] });
  const dir = mkdtempSync(join(tmpRoot, "auth-"));
  try {
    const authFile = join(dir, "auth.json");
    const auth = Buffer.from(`${creds.username}:${creds.password}`).toString("base64");
    writeFileSync(authFile, JSON.stringify({ auths: { [ref.registry]: { auth } } }), { mode: 0o600 });
    return await fn({ ...base, authFile, secrets: [creds.password, auth] });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `skopeo inspect --raw`: the manifest (or manifest list) exactly as the registry serves it. */
export async function inspectRawManifest(
  o: ResolvedImageStoreOptions,
  access: RegistryAccess,
  transportRef: string,
  signal?: AbortSignal,
): Promise<string> {
  const args = ["inspect", "--raw"];
  if (access.insecure) args.push("--tls-verify=false");
  else if (access.certDir) args.push("--cert-dir", access.certDir);
  if (access.authFile) args.push("--authfile", access.authFile);
  args.push(`docker://${transportRef}`);
  try {
    const r = await o.runner.run(o.skopeo, args, {
      timeoutMs: o.inspectTimeoutMs,
      ...(signal ? { signal } : {}),
    });
    return r.stdout;
  } catch (e) {
    throw registryError(e, { ...access, tool: o.skopeo });
  }
}
