import { invalid } from "../../shared/errors.ts";

/** An image reference split the way Docker and containers/image read it. */
export interface ImageReference {
  /** Registry host, with port when given ("docker.io", "127.0.0.1:5000"). */
  registry: string;
  /** Repository path inside the registry ("library/python", "berth/python"). */
  repository: string;
  tag?: string;
  /** "sha256:<hex>" when the reference is pinned. */
  digest?: string;
  /** The fully qualified form: registry/repository[:tag][@digest]. */
  canonical: string;
}

export const DOCKER_HUB = "docker.io";

const DIGEST_RE = /^sha256:[0-9a-f]{64}$/;
const TAG_RE = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;
const HOST_RE = /^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:]+\])(?::\d{1,5})?$/;
const PATH_COMPONENT_RE = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/;

export const isDigest = (s: string): boolean => DIGEST_RE.test(s);

/** The hex part of "sha256:<hex>"; used as a file and tag name. */
export function digestHex(digest: string): string {
  if (!isDigest(digest)) throw invalid(`not a sha256 digest: ${JSON.stringify(digest)}`);
  return digest.slice("sha256:".length);
}

/**
 * Parses "python:3.11", "ghcr.io/org/img@sha256:...", "127.0.0.1:5000/a/b:tag".
 * A first component with a dot, a colon or named "localhost" is a registry
 * host; otherwise the image is on Docker Hub, under "library/" when it has no
 * namespace. A reference with neither tag nor digest gets "latest".
 */
export function parseImageReference(ref: string): ImageReference {
  const input = ref.trim();
  if (!input) throw invalid("an image reference is empty");
  if (/\s/.test(input) || input.includes("://")) {
    throw invalid(
      `image reference ${JSON.stringify(ref)} is malformed (expected host/repo[:tag][@sha256:...])`,
    );
  }
  let rest = input;
  let digest: string | undefined;
  const at = rest.indexOf("@");
  if (at >= 0) {
    digest = rest.slice(at + 1);
    rest = rest.slice(0, at);
    if (!isDigest(digest)) throw invalid(`image reference ${JSON.stringify(ref)} has a malformed digest`);
  }
  let tag: string | undefined;
  const lastSlash = rest.lastIndexOf("/");
  const colon = rest.lastIndexOf(":");
  if (colon > lastSlash) {
    tag = rest.slice(colon + 1);
    rest = rest.slice(0, colon);
    if (!TAG_RE.test(tag)) throw invalid(`image reference ${JSON.stringify(ref)} has a malformed tag`);
  }
  const parts = rest.split("/");
  let registry = DOCKER_HUB;
  const first = parts[0] ?? "";
  if (parts.length > 1 && (first.includes(".") || first.includes(":") || first === "localhost")) {
    registry = first;
    parts.shift();
    if (!HOST_RE.test(registry)) {
      throw invalid(
        `image reference ${JSON.stringify(ref)} has a malformed registry host ${JSON.stringify(registry)}`,
      );
    }
  }
  if (registry === "index.docker.io" || registry === "registry-1.docker.io") registry = DOCKER_HUB;
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift("library");
  for (const p of parts) {
    if (!PATH_COMPONENT_RE.test(p)) {
      throw invalid(
        `image reference ${JSON.stringify(ref)} has a malformed repository component ${JSON.stringify(p)}`,
      );
    }
  }
  if (!tag && !digest) tag = "latest";
  const repository = parts.join("/");
  const canonical = `${registry}/${repository}${tag ? `:${tag}` : ""}${digest ? `@${digest}` : ""}`;
  return { registry, repository, ...(tag ? { tag } : {}), ...(digest ? { digest } : {}), canonical };
}

/** The same image pinned to one manifest digest (tag dropped: digest wins). */
export function pinnedReference(ref: ImageReference, digest: string): string {
  return `${ref.registry}/${ref.repository}@${digest}`;
}

/** True for registries on this host; traffic to them never leaves the machine. */
export function isLoopbackRegistry(registry: string): boolean {
  const host = registryHostname(registry);
  return host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

function registryHostname(registry: string): string {
  if (registry.startsWith("[")) return registry.slice(1, registry.indexOf("]"));
  const colon = registry.lastIndexOf(":");
  return colon >= 0 ? registry.slice(0, colon) : registry;
}
