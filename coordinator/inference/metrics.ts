// The /v1 gateway in Prometheus (docs/inference.md, docs/metrics.md): like
// the coordinator's other series, cluster aggregates only (route, status,
// token kind); per-workspace figures are the usage route's.

import { Counter, Histogram, type Registry } from "prom-client";
import type { TokenUsage } from "./usage-tap.ts";

export class InferenceMetrics {
  private readonly requests: Counter<"route" | "status_code">;
  private readonly tokens: Counter<"route" | "kind">;
  private readonly ttft: Histogram<"route">;
  private readonly duration: Histogram<"route">;

  constructor(registry: Registry) {
    const registers = [registry];
    this.requests = new Counter({
      name: "berth_inference_requests_total",
      help: "/v1 inference requests answered, by route and HTTP status (499: the caller left)",
      labelNames: ["route", "status_code"],
      registers,
    });
    this.tokens = new Counter({
      name: "berth_inference_tokens_total",
      help: "Tokens of /v1 requests as the model servers reported them, by kind (prompt, completion)",
      labelNames: ["route", "kind"],
      registers,
    });
    this.ttft = new Histogram({
      name: "berth_inference_time_to_first_token_seconds",
      help: "Request start to the first byte of the answer (the first token of a stream)",
      labelNames: ["route"],
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180],
      registers,
    });
    this.duration = new Histogram({
      name: "berth_inference_request_duration_seconds",
      help: "Request start to its end",
      labelNames: ["route"],
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 180, 600],
      registers,
    });
  }

  observe(
    route: string,
    status: number,
    usage: TokenUsage | undefined,
    ttftMs: number | null,
    durationMs: number,
  ): void {
    this.requests.inc({ route, status_code: String(status) });
    if (usage?.promptTokens) this.tokens.inc({ route, kind: "prompt" }, usage.promptTokens);
    if (usage?.completionTokens) this.tokens.inc({ route, kind: "completion" }, usage.completionTokens);
    if (ttftMs !== null) this.ttft.observe({ route }, ttftMs / 1000);
    this.duration.observe({ route }, durationMs / 1000);
  }
}
