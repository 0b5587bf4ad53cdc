// Cloud bucket mounts (docs/buckets.md): the rules for a CloudBucket entry of
// a stub config's `volumes` and for the agent's BucketMount. The coordinator
// (when a stub is registered and a container starts) and the agent (before it
// runs s3fs) judge names, endpoints and regions by the same rules; each value
// ends up inside s3fs's comma-separated `-o` options, so none may hold a comma.

import { invalid } from "./errors.ts";
import { checkMountPath } from "./volumes.ts";

/**
 * A bucket name as providers allow it: 3-255 letters, digits, `.`, `_`, `-`,
 * starting with a letter or digit (S3 itself is stricter; "must equal the
 * bucket name at the provider"). It also names a directory on the agent.
 */
export const BUCKET_NAME_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{2,254}$/;
/** Secret names are environment variable names (coordinator/secrets). */
const SECRET_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const REGION_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

/** A CloudBucketConfig as the SDK sends it (spec "Volume and CloudBucket"). */
export interface StubBucketConfig {
  read_only: boolean;
  /** Name of the workspace secret holding the access key; null with secret_key null: a public bucket. */
  access_key: string | null;
  secret_key: string | null;
  endpoint: string | null;
  region: string | null;
}

/** A `volumes` entry with a `config`: a CloudBucket. */
export interface StubBucket {
  name: string;
  mount_path: string;
  config: StubBucketConfig;
}

/** Whether a stub config's `volumes` entry is a CloudBucket (it carries a config) rather than a Volume. */
export function isBucketEntry(entry: unknown): boolean {
  return typeof entry === "object" && entry !== null && "config" in entry;
}

export function checkBucketName(name: unknown, field = "name"): string {
  if (typeof name !== "string" || !BUCKET_NAME_RE.test(name)) {
    throw invalid(
      `cloud bucket ${field} ${JSON.stringify(name)} is not valid: use 3-255 letters, digits, '.', '_' or '-', starting with a letter or digit`,
      { field },
    );
  }
  return name;
}

/** An http(s) URL without credentials, query or fragment; returned without a trailing slash. */
export function checkBucketEndpoint(v: unknown, bucket: string, field = "endpoint"): string {
  let url: URL | undefined;
  try {
    url = typeof v === "string" && !v.includes(",") ? new URL(v) : undefined;
  } catch {
    url = undefined;
  }
  if (
    !url ||
    (url.protocol !== "http:" && url.protocol !== "https:") ||
    url.username ||
    url.password ||
    url.search ||
    url.hash
  ) {
    throw invalid(
      `cloud bucket ${bucket}: endpoint ${JSON.stringify(v)} must be an http:// or https:// URL without credentials, query or commas`,
      { field },
    );
  }
  return url.toString().replace(/\/+$/, "");
}

export function checkBucketRegion(v: unknown, bucket: string, field = "region"): string {
  if (typeof v !== "string" || !REGION_RE.test(v)) {
    throw invalid(
      `cloud bucket ${bucket}: region ${JSON.stringify(v)} must be 1-64 letters, digits, '_' or '-'`,
      { field },
    );
  }
  return v;
}

const optionalString = (v: unknown): v is string | null | undefined =>
  v === null || v === undefined || typeof v === "string";

/** One CloudBucket entry of a stub config, checked; `field` names it in errors. */
export function checkStubBucket(entry: unknown, field: string): StubBucket {
  const e = (typeof entry === "object" && entry !== null ? entry : {}) as Record<string, unknown>;
  const name = checkBucketName(e.name, `${field}.name`);
  const mount_path = checkMountPath(e.mount_path, `${field}.mount_path`);
  const c = e.config;
  if (typeof c !== "object" || c === null || Array.isArray(c)) {
    throw invalid(`cloud bucket ${name}: config must be a CloudBucketConfig object`, { field: `${field}.config` });
  }
  const cfg = c as Record<string, unknown>;
  for (const k of ["access_key", "secret_key", "endpoint", "region"]) {
    if (!optionalString(cfg[k]))
      throw invalid(`cloud bucket ${name}: config.${k} must be a string or null`, { field: `${field}.config.${k}` });
  }
  if (cfg.read_only !== undefined && cfg.read_only !== null && typeof cfg.read_only !== "boolean") {
    throw invalid(`cloud bucket ${name}: config.read_only must be a boolean`, { field: `${field}.config.read_only` });
  }
  const secretName = (k: "access_key" | "secret_key"): string | null => {
    const v = cfg[k];
    if (v === null || v === undefined || v === "") return null;
    if (!SECRET_NAME_RE.test(v as string)) {
      throw invalid(
        `cloud bucket ${name}: config.${k} ${JSON.stringify(v)} must name a workspace secret (letters, digits and '_', not starting with a digit)`,
        { field: `${field}.config.${k}` },
      );
    }
    return v as string;
  };
  const access_key = secretName("access_key");
  const secret_key = secretName("secret_key");
  if ((access_key === null) !== (secret_key === null)) {
    throw invalid(
      `cloud bucket ${name}: config needs both access_key and secret_key (secret names), or neither for a public bucket`,
      { field: `${field}.config` },
    );
  }
  const blank = (v: unknown) => v === null || v === undefined || v === "";
  return {
    name,
    mount_path,
    config: {
      read_only: cfg.read_only === true,
      access_key,
      secret_key,
      endpoint: blank(cfg.endpoint) ? null : checkBucketEndpoint(cfg.endpoint, name, `${field}.config.endpoint`),
      region: blank(cfg.region) ? null : checkBucketRegion(cfg.region, name, `${field}.config.region`),
    },
  };
}

/** The CloudBucket entries of a stub config's `volumes`, checked; names unique. */
export function checkStubBuckets(volumes: unknown): StubBucket[] {
  if (!Array.isArray(volumes)) return [];
  const seen = new Set<string>();
  const out: StubBucket[] = [];
  volumes.forEach((entry, i) => {
    if (!isBucketEntry(entry)) return;
    const b = checkStubBucket(entry, `volumes[${i}]`);
    if (seen.has(b.name)) throw invalid(`cloud bucket ${b.name} is listed twice`, { field: `volumes[${i}].name` });
    seen.add(b.name);
    out.push(b);
  });
  return out;
}
