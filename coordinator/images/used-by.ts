// Which deployments run a built image: `berth image rm` refuses while any
// active deployment's stub names the image (its agent reference, or its id).

import type { BuiltImage } from "./store.ts";
import type { DeploymentWithStub } from "../deployments/index.ts";

/** ImageBuildsOptions.usedBy over the deployment store: the names of the workspace's active deployments of the image. */
export function deploymentsUsingImage(deployments: {
  listWithStubs(o: { activeOnly?: boolean }): Promise<DeploymentWithStub[]>;
}): (workspaceId: string, image: BuiltImage) => Promise<string[]> {
  return async (workspaceId, image) => {
    const names = new Set<string>();
    for (const d of await deployments.listWithStubs({ activeOnly: true })) {
      if (d.workspaceId !== workspaceId) continue;
      const ref = d.extra.image_ref;
      if (ref && (ref === image.imageId || (image.ref !== "" && ref === image.ref))) names.add(d.name);
    }
    return [...names].sort();
  };
}
