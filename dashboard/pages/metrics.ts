// Metrics as plots: the pools' capacity, allocation and use, and the
// workspace's (or one stub's) containers, CPU, memory and tasks, from the
// metrics API's time series (docs/metrics.md).

import { html } from "htm/preact";
import { api, type Series, type TimeSeries } from "../api.ts";
import { LineChart } from "../chart.ts";
import { ErrorNote, usePoll } from "../hooks.ts";

/** Ranges offered, each with a step that keeps the buckets few (pool rows are written every 15 s). */
const RANGES: Record<string, { seconds: number; step: string }> = {
  "15m": { seconds: 900, step: "15s" },
  "1h": { seconds: 3600, step: "60s" },
  "6h": { seconds: 6 * 3600, step: "5m" },
  "1d": { seconds: 86400, step: "15m" },
};

const pick = (all: Series[] | undefined, ...names: string[]) => (all ?? []).filter((s) => names.includes(s.name));

function setQuery(key: string, value: string) {
  const q = new URLSearchParams(location.hash.split("?")[1] ?? "");
  if (value) q.set(key, value);
  else q.delete(key);
  location.hash = `#/metrics${q.size ? `?${q}` : ""}`;
}

export function MetricsPage({ ws, query }: { ws: string; query: URLSearchParams }) {
  const rangeName = query.get("range") ?? "15m";
  const range = RANGES[rangeName] ?? RANGES["15m"]!;
  const stub = query.get("stub_id") ?? "";
  const args = () =>
    new URLSearchParams({
      from: new Date(Date.now() - range.seconds * 1000).toISOString(),
      step: range.step,
      ...(stub ? { stub_id: stub } : {}),
    });
  const w = encodeURIComponent(ws);
  const pool = usePoll(() => api<TimeSeries>(`/api/v1/metrics/${w}/pool-timeseries?${args()}`), `pool-${rangeName}`, 15000);
  const work = usePoll(
    () => api<TimeSeries>(`/api/v1/metrics/${w}/${stub ? "stub" : "workspace"}-timeseries?${args()}`),
    `work-${rangeName}-${stub}`,
    15000,
  );
  const p = pool.data?.series;
  const s = work.data?.series;
  return html`
    <section data-testid="metrics-page">
      <h2>Metrics</h2>
      <form class="filters" onSubmit=${(e: Event) => e.preventDefault()}>
        <label>range
          <select value=${rangeName} onChange=${(e: Event) => setQuery("range", (e.target as HTMLSelectElement).value)}>
            ${Object.keys(RANGES).map((r) => html`<option value=${r}>${r}</option>`)}
          </select>
        </label>
        <label>stub <input value=${stub} placeholder="all of the workspace"
          onChange=${(e: Event) => setQuery("stub_id", (e.target as HTMLInputElement).value.trim())} /></label>
      </form>
      <${ErrorNote} error=${pool.error ?? work.error} />
      <h3>Pools</h3>
      <div class="charts">
        <${LineChart} title="CPU (cores)" series=${pick(p, "cpu_capacity", "cpu_allocated", "cpu_used")} />
        <${LineChart} title="Memory" series=${pick(p, "memory_capacity", "memory_allocated", "memory_used")} />
        <${LineChart} title="GPUs" series=${pick(p, "gpu_capacity", "gpu_allocated")} />
      </div>
      <h3>${stub ? `Stub ${stub}` : "Workspace"}</h3>
      <div class="charts">
        <${LineChart} title="Containers" series=${pick(s, "containers")} />
        <${LineChart} title="CPU used (cores)" series=${pick(s, "cpu_cores")} />
        <${LineChart} title="Memory used" series=${pick(s, "memory_bytes")} />
        <${LineChart} title="Tasks created" series=${pick(s, "tasks_created").filter((x) => x.points.some(([, v]) => v))} />
        ${stub ? html`<${LineChart} title="Task run time (ms)" series=${pick(s, "task_duration_p50", "task_duration_max")} />` : null}
      </div>
    </section>`;
}
