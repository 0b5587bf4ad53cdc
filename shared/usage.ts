// The usage report's wire shape (docs/usage.md), as the coordinator answers
// GET /api/v1/usage/{workspace}/report and as the CLI and the dashboard read it.

export type UsageDimension = "day" | "deployment" | "member";
export const USAGE_DIMENSIONS: readonly UsageDimension[] = ["day", "deployment", "member"];

export interface UsageFigures {
  /** Task runs that started in the row. */
  tasks: number;
  /** Sandbox and pod containers that started in the row. */
  sandboxes: number;
  /** Seconds containers ran work. */
  run_seconds: number;
  /** Requested cores times run seconds. */
  cpu_seconds: number;
  /** Requested memory (GiB) times run seconds. */
  memory_gib_seconds: number;
  /** Requested GPUs times run seconds, all types. */
  gpu_seconds: number;
  /** gpu_seconds by GPU type. */
  gpu_seconds_by_type: Record<string, number>;
  inference_requests: number;
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface UsageKey {
  /** YYYY-MM-DD (UTC). */
  day?: string;
  /** The deployment's name; null for work of no deployment (functions run directly, sandboxes). */
  deployment?: string | null;
  /** The token that submitted the work; null when none did. */
  member?: { id: string; name: string } | null;
}

export interface UsageRow extends UsageKey {
  usage: UsageFigures;
}

export interface StorageNow {
  /** When the figures were read (ISO 8601). */
  at: string;
  volume_bytes: number;
  /** Code archives the workspace uploaded. */
  object_bytes: number;
  /** Sandbox filesystem and memory snapshots. */
  snapshot_bytes: number;
}

export interface UsageReport {
  from: string;
  to: string;
  by: UsageDimension[];
  totals: UsageFigures;
  rows: UsageRow[];
  storage: StorageNow;
}
