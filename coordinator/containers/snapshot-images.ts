// Functions and deployments whose image is a sandbox's filesystem snapshot
// (`Image.from_id(id)`, docs/images.md): the stub names the snapshot by its
// `img-` id; the snapshot is an image in one agent's store. The manager sees
// the stub with the agent's reference and that agent as the only place its
// containers may start, or, for an id the workspace does not have, why none
// can start.

import { hasKind } from "../../shared/ids.ts";
import type { StubRecord, StubSource } from "./types.ts";

/** A sandbox filesystem snapshot as the sandbox store records it. */
export interface SnapshotImages {
  findImage(workspaceId: string, id: string): Promise<{ agentId: string; imageRef: string } | undefined>;
}

/** A StubSource whose stubs of a snapshot image carry its reference and agent (StubRecord.imageAgents). */
export function withSnapshotImages(stubs: StubSource, images: SnapshotImages): StubSource {
  return {
    async get(stubId) {
      const stub = await stubs.get(stubId);
      const ref = stub?.extra.image_ref;
      if (!stub || !ref || !hasKind(ref, "img")) return stub;
      const image = await images.findImage(stub.workspaceId, ref);
      if (!image) {
        return {
          ...stub,
          imageError: `image ${ref} not found in this workspace (Image.from_id names a sandbox's filesystem snapshot, create_image_from_filesystem())`,
        } satisfies StubRecord;
      }
      return {
        ...stub,
        extra: { ...stub.extra, image_ref: image.imageRef },
        imageAgents: [image.agentId],
      } satisfies StubRecord;
    },
  };
}
