import type { StubRecord, StubRepo } from "../../coordinator/tasks/stub-store.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";

/** The top-level fields of the spec's Task object (the task status API), sorted. */
export const SPEC_TASK_FIELDS = [
  "container_id",
  "created_at",
  "ended_at",
  "id",
  "outputs",
  "started_at",
  "stats",
  "status",
  "stub",
  "updated_at",
];

export function stubConfig(over: Partial<StubConfig> = {}): StubConfig {
  return {
    runtime: { cpu: 1, gpu: "", memory: 128, image_id: "" },
    handler: "app:square",
    on_start: "",
    python_version: "python3",
    keep_warm_seconds: 10,
    max_pending_tasks: 100,
    callback_url: "",
    task_policy: { max_retries: 3, timeout: 3600, expires: "" },
    workers: 1,
    authorized: true,
    volumes: null,
    autoscaler: { type: "queue_depth", max_containers: 1, tasks_per_container: 1 },
    ...over,
  };
}

export function stubExtra(over: Partial<StubExtra> = {}): StubExtra {
  return {
    cpu_millicores: 1000,
    gpu_types: [],
    gpu_count: 0,
    retry_for: [],
    image_ref: "",
    code_sha256: "",
    secrets: [],
    headless: false,
    ...over,
  };
}

/** A stub (by default a function named "f") with the default config and extra and no code object, stored in `stubs`. */
export async function storedStub(
  stubs: StubRepo,
  workspaceId: string,
  o: { name?: string; type?: string } = {},
): Promise<StubRecord> {
  const input = { name: o.name ?? "f", type: o.type ?? "function", config: stubConfig(), extra: stubExtra() };
  return (await stubs.upsert(workspaceId, { ...input, objectId: null })).stub;
}
