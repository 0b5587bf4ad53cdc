// What a deployment may be (docs/deployments.md): its kinds, its name, and
// the checks that refuse a broken one before anything is stored.

import { checkBotDefinition } from "../../shared/bots.ts";
import { resolveEgressPolicy } from "../../shared/egress.ts";
import { invalid } from "../../shared/errors.ts";
import type { StubConfig, StubExtra } from "../../shared/tasks.ts";
import { parseCron } from "../schedules/index.ts";

export const DEPLOYMENT_KINDS = [
  "endpoint",
  "asgi",
  "realtime",
  "taskqueue",
  "schedule",
  "function",
  "pod",
  "bot",
] as const;
export type DeploymentKind = (typeof DEPLOYMENT_KINDS)[number];
export const DEPLOYMENT_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/;
/** Kinds whose JSON bodies are checked against extra.handler_params. */
const NEEDS_HANDLER_PARAMS: ReadonlySet<string> = new Set(["endpoint", "realtime", "taskqueue"]);

export interface DeployInput {
  name: string;
  kind: string;
  config: StubConfig;
  extra: StubExtra;
  serve?: boolean;
}

/** Refuses what would make a broken deployment, naming the reason. */
export function checkDeployment(input: DeployInput): void {
  const { name, kind, extra } = input;
  if (!(DEPLOYMENT_KINDS as readonly string[]).includes(kind))
    throw invalid(
      `unknown deployment type ${JSON.stringify(kind)}: use one of ${DEPLOYMENT_KINDS.join(", ")}`,
    );
  if (typeof name !== "string" || !DEPLOYMENT_NAME.test(name))
    throw invalid(
      `deployment name ${JSON.stringify(name)} is not valid: 1 to 63 letters, digits, '_', '.' or '-', starting with a letter or digit`,
    );
  // `/endpoint/id/{id}` and `/taskqueue/id/{id}` call by id.
  if (name === "id")
    throw invalid('the deployment name "id" is reserved (URLs /endpoint/id/{deployment_id})');
  if (kind === "schedule") {
    if (!extra.when) throw invalid("a schedule needs extra.when, its cron expression");
    parseCron(extra.when);
  }
  if (kind === "pod") checkPod(extra);
  if (kind === "bot") checkBotDefinition(extra.bot);
  if (NEEDS_HANDLER_PARAMS.has(kind) && !extra.handler_params)
    throw invalid(`a ${kind} deployment needs extra.handler_params (berth.client.describe writes them)`);
}

/** A pod runs its own entrypoint (docs/sandboxes.md, Pods); its egress fields follow the sandbox rules. */
function checkPod(extra: StubExtra): void {
  if (!extra.entrypoint || extra.entrypoint.length === 0)
    throw invalid("a pod deployment needs extra.entrypoint, the command its container runs");
  resolveEgressPolicy({ block_network: extra.block_network ?? false, allow_list: extra.allow_list ?? [] });
}
