// Server side of BuildImage: decode, build, stream the events. A client that
// cancels stops following; the build itself goes on (another request may be
// following it, and its finished steps are cache for the next).

import type * as grpc from "@grpc/grpc-js";
import { BerthError } from "../../shared/errors.ts";
import type { ImageBuildApi } from "../../api/index.ts";
import {
  buildEventToProto,
  buildRequestFromProto,
  toGrpcError,
  type WireBuildImageRequest,
} from "../../api/grpc/index.ts";
import type { Authorize } from "./container-handlers.ts";

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
    BuildImage: (call: grpc.ServerWritableStream<WireBuildImageRequest, unknown>) => {
      const abort = new AbortController();
      call.on("cancelled", () => abort.abort());
      (async () => {
        authorize(call);
        if (!builds) {
          throw new BerthError(
            "not_implemented",
            "this agent does not build images (it was started without a container host)",
          );
        }
        for await (const e of builds.buildImage(buildRequestFromProto(call.request), {
          signal: abort.signal,
        })) {
          if (call.cancelled) break;
          if (!call.write(buildEventToProto(e)) && !call.cancelled)
            await new Promise((r) => call.once("drain", r));
        }
      })().then(
        () => {
          if (!call.cancelled) call.end();
        },
        (e: unknown) => {
          if (!call.cancelled) call.emit("error", toGrpcError(e));
        },
      );
    },
  };
}
