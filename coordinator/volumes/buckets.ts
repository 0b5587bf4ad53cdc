// The CloudBuckets of a stub as the agent's request carries them
// (docs/buckets.md): the stub config names the workspace secrets that hold
// the keys; their values are read at each container start (so an updated
// secret reaches the next container) and travel only in the request.

import type { BucketMount } from "../../api/index.ts";
import { checkStubBuckets } from "../../shared/buckets.ts";
import { BerthError, describeError, isBerthError } from "../../shared/errors.ts";

/**
 * The stub's buckets with their keys. Fails with the secret store's code
 * (not_found for a missing secret), the message naming the bucket; never a
 * secret's value.
 */
export async function stubBucketMounts(
  stub: { workspaceId: string; config: { volumes?: unknown } },
  secrets:
    | { resolve(workspaceId: string, names: readonly string[]): Promise<Record<string, string>> }
    | undefined,
): Promise<BucketMount[]> {
  const out: BucketMount[] = [];
  for (const b of checkStubBuckets(stub.config.volumes)) {
    const m: BucketMount = { name: b.name, mountPath: b.mount_path };
    if (b.config.read_only) m.readOnly = true;
    if (b.config.endpoint) m.endpoint = b.config.endpoint;
    if (b.config.region) m.region = b.config.region;
    const { access_key, secret_key } = b.config;
    if (access_key && secret_key) {
      if (!secrets)
        throw new BerthError(
          "failed_precondition",
          `cloud bucket ${b.name} needs secrets ${access_key} and ${secret_key} but this coordinator has no secret store`,
        );
      let values: Record<string, string>;
      try {
        values = await secrets.resolve(stub.workspaceId, [access_key, secret_key]);
      } catch (e) {
        const code = isBerthError(e) ? e.code : "internal";
        throw new BerthError(code, `cloud bucket ${b.name}: ${describeError(e)}`, { bucket: b.name });
      }
      m.accessKey = values[access_key];
      m.secretKey = values[secret_key];
    }
    out.push(m);
  }
  return out;
}
