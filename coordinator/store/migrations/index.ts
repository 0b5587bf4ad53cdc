import type { Migration, MigrationProvider } from "kysely";
import * as m0001 from "./0001_foundation.ts";
import * as m0002 from "./0002_tasks.ts";
import * as m0003 from "./0003_secrets.ts";
import * as m0004 from "./0004_schedules.ts";
import * as m0005 from "./0005_deployments.ts";
import * as m0006 from "./0006_webhooks.ts";
import * as m0007 from "./0007_limits.ts";
import * as m0008 from "./0008_sandboxes.ts";
import * as m0009 from "./0009_metrics.ts";
import * as m0011 from "./0011_queue_limits.ts";
import * as m0012 from "./0012_built_images.ts";
import * as m0013 from "./0013_volume_limits.ts";
import * as m0016 from "./0016_inference.ts";
import * as m0017 from "./0017_bot_sessions.ts";
import * as m0019 from "./0019_stacks.ts";
import * as m0020 from "./0020_databases.ts";

// Versioned migrations, applied in key order at coordinator start. Never edit
// a released migration; add the next number.
const MIGRATIONS: Record<string, Migration> = {
  "0001_foundation": m0001,
  "0002_tasks": m0002,
  "0003_secrets": m0003,
  "0004_schedules": m0004,
  "0005_deployments": m0005,
  "0006_webhooks": m0006,
  "0007_limits": m0007,
  "0008_sandboxes": m0008,
  "0009_metrics": m0009,
  "0011_queue_limits": m0011,
  "0012_built_images": m0012,
  "0013_volume_limits": m0013,
  "0016_inference": m0016,
  "0017_bot_sessions": m0017,
  "0019_stacks": m0019,
  "0020_databases": m0020,
};

export const migrationProvider: MigrationProvider = {
  getMigrations: async () => MIGRATIONS,
};
