// Built images reach every host (docs/images.md, "The cluster registry"):
// after the builder's `done`, a build that names a push repository is
// pushed to the cluster registry as `<repository>:<image id>`, with `push`
// progress events, and `done` carries the pushed reference. The push is per
// request, outside the builder's shared build: two workspaces that build
// the same image id at once each get it in their own repository. Concurrent
// pushes of one image to one repository share one upload.

import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";
import { isRepositoryName } from "../../shared/registry-client.ts";
import { Fanout } from "../../shared/fanout.ts";
import type { PushProgress } from "../images/index.ts";

/** What pushing needs of the image store. */
export interface ClusterPusher {
  pushToCluster(
    refOrDigest: string,
    to: { repository: string; tag: string },
    opts: { onProgress?: (p: PushProgress) => void; signal?: AbortSignal },
  ): Promise<string>;
}

/** Wraps a builder so that builds naming a push repository end pushed to the cluster registry. */
export class PushingBuilds<B extends ImageBuildApi = ImageBuildApi> implements ImageBuildApi {
  private readonly pushes = new Map<string, Fanout<BuildEvent>>();

  constructor(
    /** The builder itself (ImageBuilder), for what else it offers (redact). */
    readonly inner: B,
    private readonly pusher: ClusterPusher,
  ) {}

  async *buildImage(req: BuildImageRequest, opts: { signal?: AbortSignal } = {}): AsyncGenerator<BuildEvent> {
    const repository = req.pushRepository;
    if (repository !== undefined && !isRepositoryName(repository))
      throw new BerthError(
        "invalid_request",
        `push repository ${JSON.stringify(repository)} is not a registry repository name`,
      );
    const { pushRepository: _, ...build } = req;
    for await (const e of this.inner.buildImage(build, opts)) {
      if (e.type !== "done" || !repository) {
        yield e;
        continue;
      }
      const key = `${repository}\0${e.digest}`;
      let f = this.pushes.get(key);
      if (!f) {
        const fan = new Fanout<BuildEvent>();
        f = fan;
        this.pushes.set(key, fan);
        void fan
          .run(async (emit) => {
            const pushedRef = await this.pusher.pushToCluster(
              e.ref,
              { repository, tag: e.imageId },
              { onProgress: (p) => emit({ type: "push", ...p }) },
            );
            emit({ ...e, pushedRef });
          })
          .finally(() => this.pushes.delete(key));
      }
      yield* f.follow(opts.signal);
    }
  }
}
