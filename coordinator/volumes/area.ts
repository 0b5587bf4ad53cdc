// The volumes area (docs/volumes.md): workspace volumes' files and routes.
import type { Area, AreaRoutes } from "../http/index.ts";
import type { Limits } from "../limits/index.ts";
import { type VolumeRouteDeps, volumeRoutes } from "./routes.ts";
import { VolumeFiles } from "./volume-files.ts";

export function volumesHttpRoutes(d: VolumeRouteDeps): AreaRoutes {
  return { api: [volumeRoutes(d)] };
}

export interface VolumesDeps {
  /** Where the volumes live (the shared volume root). */
  root: string;
  /** The volume quota (max_volume_mb) comes from it; the volumes' bytes are reported to it. */
  limits: Pick<Limits, "get" | "report">;
}

export function createVolumes(d: VolumesDeps): Area<VolumeFiles> {
  const files = new VolumeFiles(d.root);
  d.limits.report({ volumeBytes: (ws) => files.workspaceBytes(ws) });
  const maxVolumeBytes = async (ws: string) => {
    const mb = (await d.limits.get(ws)).maxVolumeMb;
    return mb === null ? null : mb * 1024 * 1024;
  };
  return { service: files, routes: volumesHttpRoutes({ files, maxVolumeBytes }) };
}
