// The survivors' check for image builds whose coordinator died
// (docs/reliability.md, "Several coordinators"). A build runs on an agent
// for the coordinator that placed it, over one gRPC stream; when that
// coordinator dies the agent cancels the build, and its record would say
// `building` forever (and `berth image rm` would refuse it). Every live
// coordinator checks every CHECK_MS: the records `building` since longer
// than GRACE_MS that no coordinator claims on two checks in a row
// (coordinator/streams/claims.ts; only when this coordinator heard its own
// question) are marked `failed`, saying why. The store marks a record only
// while it is still that `building` row, so a newer build of the same image
// is never touched, and two survivors mark it once.

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { BuiltImage, BuiltImageRepo } from "./store.ts";
import { ClusterClaims } from "../streams/index.ts";
import { OrphanSweep } from "../streams/index.ts";
import { buildingKey } from "./service.ts";

/** Core NATS, coordinator → coordinators: "which of these builds (workspaceId/imageId) do you run?" */
export const IMAGE_BUILDS_RUNNING_SUBJECT = "berth.cluster.image-builds-running";
/** How often every coordinator checks. */
export const BUILD_ORPHAN_CHECK_MS = 15_000;
/** A record `building` for less than this is not checked. */
export const BUILD_ORPHAN_GRACE_MS = 15_000;
/** The error of a build whose coordinator died. */
export const BUILD_COORDINATOR_DIED =
  "the coordinator running this build died (the agent cancelled it); build again";

export interface BuildOrphanDeps {
  nats: NatsConnection;
  repo: BuiltImageRepo;
  /** Whether this coordinator runs that build (ImageBuilds.holds). */
  holds: (key: string) => boolean;
  /** Told of each record marked failed (image.failed events). */
  onStatus?: (image: BuiltImage) => void;
  log: Logger;
  clock?: () => number;
  /** @default BUILD_ORPHAN_CHECK_MS */
  intervalMs?: number;
  /** @default BUILD_ORPHAN_GRACE_MS */
  graceMs?: number;
  /** How long a check waits for the coordinators' answers. @default ClusterClaims' wait */
  answerWaitMs?: number;
}

export class BuildOrphanCheck {
  private readonly claims: ClusterClaims;
  private readonly sweep: OrphanSweep<BuiltImage>;
  private readonly clock: () => number;

  constructor(private readonly d: BuildOrphanDeps) {
    this.clock = d.clock ?? Date.now;
    this.claims = new ClusterClaims(d.nats, IMAGE_BUILDS_RUNNING_SUBJECT, d.holds, d.log);
    this.sweep = new OrphanSweep({
      listOpen: async () => {
        const before = new Date(this.clock() - (d.graceMs ?? BUILD_ORPHAN_GRACE_MS)).toISOString();
        return (await d.repo.listAll()).filter((i) => i.status === "building" && i.updatedAt < before);
      },
      key: buildingKey,
      // A newer build of the same image is another record: unclaimed twice means at the same updatedAt.
      version: (i) => i.updatedAt,
      holds: d.holds,
      ask: (keys) => this.claims.ask(keys, ...(d.answerWaitMs !== undefined ? [d.answerWaitMs] : [])),
      end: (i) => this.fail(i),
      log: d.log,
      messages: {
        skipped: "image build check skipped: this coordinator did not hear its own question on NATS",
        endedField: "images",
        ended: "marked failed the image builds of a coordinator that died",
        failed: "cannot check for image builds of a dead coordinator",
      },
    });
  }

  /** Answers the others' questions and checks on a timer. */
  start(): void {
    this.claims.start();
    this.sweep.start(this.d.intervalMs ?? BUILD_ORPHAN_CHECK_MS);
  }

  stop(): void {
    this.sweep.stop();
    this.claims.stop();
  }

  /** One check; returns how many records it marked failed. */
  check(): Promise<number> {
    return this.sweep.check();
  }

  private async fail(i: BuiltImage): Promise<boolean> {
    const at = new Date(this.clock()).toISOString();
    if (
      !(await this.d.repo.failIfBuilding(i.workspaceId, i.imageId, i.updatedAt, BUILD_COORDINATOR_DIED, at))
    )
      return false;
    try {
      this.d.onStatus?.({ ...i, status: "failed", error: BUILD_COORDINATOR_DIED, updatedAt: at });
    } catch (e) {
      this.d.log.warn({ imageId: i.imageId, err: describeError(e) }, "image status listener failed");
    }
    return true;
  }
}
