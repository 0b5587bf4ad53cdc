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
import * as m0021 from "./0021_sandbox_exit_code.ts";
import * as m0022 from "./0022_token_roles.ts";
import * as m0023 from "./0023_audit_log.ts";
import * as m0024 from "./0024_submitter_token.ts";
import * as m0026 from "./0026_sessions.ts";
import * as m0027 from "./0027_workspace_isolation.ts";
import * as m0028 from "./0028_gpus_by_type.ts";
import * as m0029 from "./0029_compute_budgets.ts";
import * as m0030 from "./0030_workspace_sandboxing_optout.ts";
import * as m0031 from "./0031_v1_token_budget.ts";

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
  "0021_sandbox_exit_code": m0021,
  "0022_token_roles": m0022,
  "0023_audit_log": m0023,
  "0024_submitter_token": m0024,
  "0026_sessions": m0026,
  "0027_workspace_isolation": m0027,
  "0028_gpus_by_type": m0028,
  "0029_compute_budgets": m0029,
  "0030_workspace_sandboxing_optout": m0030,
  "0031_v1_token_budget": m0031,
};

export const migrationProvider: MigrationProvider = {
  getMigrations: async () => MIGRATIONS,
};
