// The coordinator's image builds (ImageBuilds) over the real planner and a
// scripted agent, for the tests of where a build is placed.

import type { BuildEvent, BuildImageRequest, ImageBuildApi } from "../../api/index.ts";
import {
  ImageBuilds,
  type ImageBuildsOptions,
  type ImageBuildUpdate,
} from "../../coordinator/images/index.ts";
import type { Planner } from "../../coordinator/scheduler/index.ts";
import { Store } from "../../coordinator/records.ts";
import { STORE_ENGINES } from "../helpers/engines.ts";

/** Records what it is asked to build and answers as an agent's builder does; `onBuild` runs as it starts. */
export class RecordingAgent implements ImageBuildApi {
  readonly calls: BuildImageRequest[] = [];
  constructor(private readonly onBuild: () => void = () => {}) {}
  async *buildImage(req: BuildImageRequest): AsyncGenerator<BuildEvent> {
    this.calls.push(req);
    this.onBuild();
    const imageId = `img-${"b".repeat(24)}`;
    yield { type: "base", imageId, ref: "default", digest: "sha256:base" };
    yield { type: "step", index: 1, total: 1, name: req.steps[0]?.name ?? "", cached: false };
    yield { type: "step_done", index: 1, cached: false, seconds: 0.1, digest: "sha256:1" };
    yield {
      type: "done",
      imageId,
      ref: "localhost/berth-build-cache:y",
      digest: "sha256:y",
      cachedSteps: 0,
      builtSteps: 1,
    };
  }
}

/** Every update of a build, once it ends. */
export async function collect(it: AsyncIterable<ImageBuildUpdate>): Promise<ImageBuildUpdate[]> {
  const out: ImageBuildUpdate[] = [];
  for await (const u of it) out.push(u);
  return out;
}

/** A store on a fresh SQLite database, closed after `t`. */
export async function sqliteStore(t: { after: (fn: () => unknown) => void }): Promise<Store> {
  const sqlite = STORE_ENGINES.find((e) => e.name === "sqlite")!;
  const store = await Store.open(await sqlite.url(t));
  t.after(() => store.close());
  return store;
}

/**
 * Image builds recorded in `store`, placed by `planner`, each sent to `agent`
 * whichever agent is chosen; `asked`: the agents chosen, in order.
 */
export function buildsThrough(
  store: Store,
  planner: Planner,
  agent: ImageBuildApi,
  more: Partial<ImageBuildsOptions> = {},
): { builds: ImageBuilds; asked: string[] } {
  const asked: string[] = [];
  const builds = new ImageBuilds({
    repo: store.builtImages,
    planner,
    agents: {
      client: (id) => {
        asked.push(id);
        return agent;
      },
    },
    ...more,
  });
  return { builds, asked };
}
