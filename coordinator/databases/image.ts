// The image database pods run: the cluster's default image plus the engines'
// Debian packages (engines.ts), built through the coordinator's image builder
// (docs/images.md) the first time a workspace creates a database and cached
// there by its steps afterwards, so no public registry is needed.

import { BerthError } from "../../shared/errors.ts";
import type { ImageBuildUpdate } from "../images/index.ts";
import { databaseImageCommands } from "./engines.ts";

export interface DatabaseImageBuilder {
  build(workspaceId: string, spec: { commands: string[] }): AsyncIterable<ImageBuildUpdate>;
}

/** The `image` option of DatabaseService over the image builder: the built image's reference. */
export function databaseImage(builds: DatabaseImageBuilder): (workspaceId: string) => Promise<string> {
  return async (workspaceId) => {
    for await (const u of builds.build(workspaceId, { commands: databaseImageCommands() })) {
      if (u.type === "image") return u.image.ref;
    }
    throw new BerthError("unavailable", "the database image build ended without an image");
  };
}
