// Which credentials the store presents to a registry, kept apart from the
// store (agent/images/store.ts) because it is one question with its own rules
// (docs/images.md, "The cluster registry"): the cluster registry's own login
// for images the cluster built, an ECR token exchanged for basic credentials,
// and the fingerprint that keys a tag's freshness by who asked. The store only
// caches and unpacks; this module decides who it is at each registry.

import { createHash } from "node:crypto";
import { BerthError } from "../../shared/errors.ts";
import type { RegistryEndpoint } from "../../shared/registry-client.ts";
import {
  type BasicRegistryCredentials,
  ecrExchangeUnavailable,
  type RegistryCredentials,
} from "./credentials.ts";
import type { ResolvedImageStoreOptions } from "./options.ts";
import { isInsecureRegistry } from "./skopeo.ts";

/**
 * The basic credentials a pull from `registry` logs in with: the caller's,
 * an ECR exchange of them, or (none given, and `registry` is the cluster
 * registry) the cluster registry's own.
 */
export async function loginCredentials(
  options: ResolvedImageStoreOptions,
  registry: string,
  creds: RegistryCredentials | undefined,
): Promise<BasicRegistryCredentials | undefined> {
  const cluster = options.clusterRegistry;
  // The cluster registry's own credentials, for images the cluster built (pushToCluster).
  if (!creds && cluster?.username && registry === cluster.host)
    return {
      kind: "basic",
      username: cluster.username,
      password: cluster.password ?? "",
      source: "generic",
    };
  if (!creds || creds.kind === "basic") return creds;
  if (!options.ecrLogin) throw ecrExchangeUnavailable(registry);
  return options.ecrLogin(creds, registry);
}

/** Where pushToCluster sends an image; fails when the agent has no cluster registry. */
export function clusterPushEndpoint(options: ResolvedImageStoreOptions): RegistryEndpoint {
  const reg = options.clusterRegistry;
  if (!reg) throw new BerthError("failed_precondition", "this agent has no cluster registry to push to");
  return {
    host: reg.host,
    insecure: isInsecureRegistry(options, reg.host),
    ...(reg.username ? { credentials: { username: reg.username, password: reg.password ?? "" } } : {}),
  };
}

/** A stable digest of the credentials a pull was made with ("" for none); never logged. */
export function credentialsFingerprint(creds: RegistryCredentials | undefined): string {
  if (!creds) return "";
  const sorted = Object.fromEntries(Object.entries(creds).sort(([a], [b]) => a.localeCompare(b)));
  return createHash("sha256").update(JSON.stringify(sorted)).digest("hex");
}
