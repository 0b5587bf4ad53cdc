// Host paths a container may bind-mount: only under the agent's allowed
// roots, judged after resolving symlinks, so a link inside an allowed root
// cannot lead out of it.

import { realpathSync } from "node:fs";
import { sep } from "node:path";
import { BerthError, invalid } from "../../shared/errors.ts";

const within = (path: string, root: string) =>
  root === "/" || path === root || path.startsWith(root.endsWith(sep) ? root : root + sep);

/** Resolves the allowed roots once; a root that does not exist is dropped. */
export function resolveMountRoots(roots: readonly string[]): string[] {
  const out: string[] = [];
  for (const r of roots) {
    try {
      out.push(realpathSync(r));
    } catch {
      // A root that does not exist yet allows nothing until it does; the host re-resolves per request.
    }
  }
  return out;
}

/** The real host path of a mount source, refused unless it lies under an allowed root. */
export function checkMountSource(source: string, allowedRoots: readonly string[], field: string): string {
  let real: string;
  try {
    real = realpathSync(source);
  } catch (e) {
    throw invalid(`${field} ${source} does not exist on the host (${(e as NodeJS.ErrnoException).code})`, {
      field,
    });
  }
  const roots = resolveMountRoots(allowedRoots);
  if (!roots.some((r) => within(real, r))) {
    const where =
      roots.length > 0
        ? `only paths under ${roots.join(", ")} may be mounted`
        : "no host paths may be mounted on this agent";
    const via = real === source ? "" : ` (it resolves to ${real})`;
    throw new BerthError("permission_denied", `${field} ${source}${via} is not allowed: ${where}`, {
      field,
      source,
      resolved: real,
    });
  }
  return real;
}
