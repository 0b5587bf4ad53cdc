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
import type { BuiltImage, BuiltImageRepo } from "../store/built-images.ts";
import { ClusterClaims } from "../streams/claims.ts";
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
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  /** Records unclaimed at the last check (key → the updatedAt seen). */
  private suspects = new Map<string, string>();
  private readonly clock: () => number;

  constructor(private readonly d: BuildOrphanDeps) {
    this.clock = d.clock ?? Date.now;
    this.claims = new ClusterClaims(d.nats, IMAGE_BUILDS_RUNNING_SUBJECT, d.holds, d.log);
  }

  /** Answers the others' questions and checks on a timer. */
  start(): void {
    this.claims.start();
    this.timer = setInterval(() => void this.check(), this.d.intervalMs ?? BUILD_ORPHAN_CHECK_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    this.claims.stop();
  }

  /** One check; returns how many records it marked failed. */
  async check(): Promise<number> {
    if (this.running) return 0;
    this.running = true;
    try {
      const before = new Date(this.clock() - (this.d.graceMs ?? BUILD_ORPHAN_GRACE_MS)).toISOString();
      const open = (await this.d.repo.listAll()).filter(
        (i) => i.status === "building" && i.updatedAt < before && !this.d.holds(buildingKey(i)),
      );
      if (open.length === 0) {
        this.suspects.clear();
        return 0;
      }
      const { claimed, heardSelf } = await this.claims.ask(
        open.map(buildingKey),
        ...(this.d.answerWaitMs !== undefined ? [this.d.answerWaitMs] : []),
      );
      if (!heardSelf) {
        this.suspects.clear();
        this.d.log.warn("image build check skipped: this coordinator did not hear its own question on NATS");
        return 0;
      }
      const next = new Map<string, string>();
      let failed = 0;
      for (const i of open) {
        const key = buildingKey(i);
        if (claimed.has(key) || this.d.holds(key)) continue;
        if (this.suspects.get(key) !== i.updatedAt) next.set(key, i.updatedAt);
        else if (await this.fail(i)) failed++;
      }
      this.suspects = next;
      if (failed > 0)
        this.d.log.warn({ images: failed }, "marked failed the image builds of a coordinator that died");
      return failed;
    } catch (e) {
      this.d.log.warn({ err: describeError(e) }, "cannot check for image builds of a dead coordinator");
      return 0;
    } finally {
      this.running = false;
    }
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
