// Server side of BuildImage: decode, build, stream the events. A client that
// cancels stops following; the build itself goes on (another request may be
// following it, and its finished steps are cache for the next).

import type * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import type { ImageBuildApi } from "../../api/index.ts";
import {
  buildEventToProto,
  buildRequestFromProto,
  type WireBuildImageRequest,
} from "../../api/grpc/index.ts";
import { type Authorize, serverStream } from "./container-handlers.ts";

/** Whether `x` (a ContainerHost, say) can build images. */
export function buildsOf(x: unknown): ImageBuildApi | undefined {
  const b = (x as { builds?: Partial<ImageBuildApi> } | undefined)?.builds;
  return b && typeof b.buildImage === "function" ? (b as ImageBuildApi) : undefined;
}

export function buildHandlers(
  builds: ImageBuildApi | undefined,
  authorize: Authorize,
): grpc.UntypedServiceImplementation {
  return {
    BuildImage: serverStream(
      authorize,
      (req: WireBuildImageRequest, signal) => {
        if (!builds) {
          throw new BerthError(
            "not_implemented",
            "this agent does not build images (it was started without a container host)",
          );
        }
        return builds.buildImage(buildRequestFromProto(req), { signal });
      },
      buildEventToProto,
    ),
  };
}
