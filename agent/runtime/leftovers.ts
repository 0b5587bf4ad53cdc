// What a previous agent left under the runtime's root, sorted before the
// runtime acts on it (ContainerRuntime.recover): containers to adopt (a
// bundle with its meta.json and a runc container running or stopped),
// bundles to remove (no meta, or runc no longer knows the container), and
// runc containers whose bundle is gone. Reading only: nothing is removed here.

import { existsSync, readdirSync } from "node:fs";
import { type OciRuntimeName, OCI_RUNTIMES, type OciRuntimeClis } from "./oci-runtimes.ts";
import type { Runc } from "./runc.ts";
import { type ContainerMeta, type ContainerPaths, containerPaths, readMeta } from "./state.ts";

type RuncState = Awaited<ReturnType<Runc["list"]>>[number];

export interface Leftovers {
  /** Bundles runc still runs (or holds stopped): watched again. `ociId` is the bundle dir's name. */
  adopt: { ociId: string; id: string; meta: ContainerMeta; paths: ContainerPaths; runc: RuncState }[];
  /** Bundles to remove; `meta` when it could be read (a container that had started gets its exit event). */
  remove: { ociId: string; id: string; meta: ContainerMeta | undefined; runcStatus: string }[];
  /** Containers a runtime knows whose bundle is gone. */
  orphans: { id: string; runtime: OciRuntimeName }[];
}

export async function surveyLeftovers(o: {
  root: string;
  stateRoots: Record<OciRuntimeName, string>;
  clis: OciRuntimeClis;
  /** OCI ids the runtime watches already. */
  adopted: ReadonlySet<string>;
  /** Directory names under root that are not bundles (the disks' own). */
  notBundle: (name: string) => boolean;
}): Promise<Leftovers> {
  // Every runtime that has a state root here: a container may run under any.
  const known = new Map<string, RuncState & { runtime: OciRuntimeName }>();
  const stateDirNames = new Set<string>();
  for (const name of OCI_RUNTIMES) {
    const root = o.stateRoots[name];
    if (root.startsWith(`${o.root}/`)) stateDirNames.add(root.slice(o.root.length + 1));
    if (name !== "runc" && !existsSync(root)) continue;
    for (const c of await o.clis.cli(name).list()) known.set(c.id, { ...c, runtime: name });
  }
  for (const name of o.adopted) known.delete(name);
  const out: Leftovers = { adopt: [], remove: [], orphans: [] };
  for (const d of readdirSync(o.root, { withFileTypes: true })) {
    if (o.notBundle(d.name)) continue;
    if (!d.isDirectory() || stateDirNames.has(d.name) || o.adopted.has(d.name)) continue;
    // The dir is named as runc knows the container; meta.json says what berth calls it (assign()).
    const ociId = d.name;
    const r = known.get(ociId);
    known.delete(ociId);
    const paths = containerPaths(o.root, ociId);
    const meta = readMeta(paths.meta);
    const id = meta?.spec.id ?? ociId;
    if (meta && r && (r.status === "running" || r.status === "stopped"))
      out.adopt.push({ ociId, id, meta, paths, runc: r });
    else out.remove.push({ ociId, id, meta, runcStatus: r?.status ?? "absent" });
  }
  for (const [id, c] of known) out.orphans.push({ id, runtime: c.runtime });
  return out;
}
