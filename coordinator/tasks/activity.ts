// What the container manager needs to know about tasks, without depending on
// how the task service stores them.

export interface StubDemand {
  stubId: string;
  workspaceId: string;
  /** Tasks PENDING or RETRY (waiting for a runner). */
  pending: number;
  /** Tasks RUNNING. */
  running: number;
}

export interface TaskActivity {
  /** Every stub with pending or running tasks. */
  demand(): StubDemand[];
  /** Pending + running of one stub (zeros when none). */
  demandOf(stubId: string): StubDemand | undefined;
  /**
   * Whether a container runs a task now and when it last started or finished
   * one (ms since epoch); undefined when it never took a task.
   */
  containerActivity(containerId: string): { busy: boolean; lastActiveAt: number } | undefined;
  /** Called (synchronously, cheaply) whenever a stub's demand changes. Returns an unsubscribe. */
  onDemandChange(listener: (stubId: string) => void): () => void;
  /**
   * Ends the stub's tasks that wait for a runner (PENDING/RETRY) as FAILED with
   * this error: for requests no agent can ever run (too large, an image that
   * does not exist), so no task waits forever.
   */
  failPending(stubId: string, error: { code: string; message: string }): Promise<number>;
  /**
   * Moves the RUNNING tasks of a container being preempted to RETRY with
   * reason `preempted` (their queue messages are redelivered, counting as a
   * retry). Returns how many. @default none: they retry once redelivered
   */
  requeuePreempted?(containerId: string, message: string): number;
}

/**
 * Why a stub's waiting tasks have no container to take them, from the
 * container manager's latest placement outcome (docs/tasks.md "Why a task
 * waits"): no room in the fleet (`no_room`, `no_agent`), a workspace limit
 * (`workspace_limit`), failed starts backing off (`start_backoff`), or a
 * container placed and starting (`container_starting`).
 */
export interface StubWait {
  kind: "no_room" | "no_agent" | "workspace_limit" | "start_backoff" | "container_starting";
  /** The planner's reason as people read it: which resource, GPU type and count, on which hosts. */
  message: string;
  /** The workspace limit that refused it (workspace_limit only). */
  limit?: string;
  /** ms since epoch: when the stub started waiting for this reason. */
  since: number;
}

/** What the task service needs back from the container manager (stats.active_containers, why tasks wait). */
export interface ContainerCounts {
  activeContainers(stubId: string): number;
  /** Why the stub's tasks wait for a container now; undefined when nothing holds them back but the queue. */
  waitState?(stubId: string): StubWait | undefined;
}
