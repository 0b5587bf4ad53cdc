// A built image's status as workspace events (docs/events.md).

import type { EmitEvent } from "../events/index.ts";
import type { BuiltImage } from "./store.ts";

/** ImageBuildsOptions.onStatus that emits image.building, image.ready and image.failed (docs/events.md). */
export function imageEvents(emit: EmitEvent): (image: BuiltImage) => void {
  return (i) =>
    emit(i.workspaceId, `image.${i.status}` as const, i.imageId, {
      image_id: i.imageId,
      status: i.status,
      base_image: i.baseImage,
      base_digest: i.baseDigest,
      digest: i.digest,
      steps: i.steps,
      ...(i.status === "failed" ? { error: i.error } : {}),
    });
}
