// The fleet: every agent with its state, CPUs, memory and GPUs by type.

import { html } from "htm/preact";
import { type Agent, ApiError, api } from "../api.ts";
import { bytes, when } from "../format.ts";
import { ErrorNote, usePoll } from "../hooks.ts";

function gpus(a: Agent): string {
  const g = a.capacity?.gpus;
  if (!g) return "–";
  const counts = Object.entries(g.counts);
  const drained = (g.drained ?? []).map((d) => `GPU ${d.index} drained since ${when(d.since)}: ${d.reason}`);
  if (counts.length === 0) return [g.reason ? `none (${g.reason})` : "none", ...drained].join("; ");
  return [counts.map(([type, n]) => `${n}× ${type}`).join(", "), ...drained].join("; ");
}

export function FleetPage() {
  const { data, error } = usePoll(
    () =>
      api<{ agents: Agent[] }>("/api/v1/agents").catch((e) => {
        if (e instanceof ApiError && e.status === 403)
          throw new Error("Listing the fleet's agents needs an admin token; this one is a workspace token.");
        throw e;
      }),
    "fleet",
  );
  const agents = data?.agents ?? [];
  const ready = agents.filter((a) => a.state === "ready");
  const totalCpu = ready.reduce((n, a) => n + (a.capacity?.cpu_cores ?? 0), 0);
  const totalMem = ready.reduce((n, a) => n + (a.capacity?.memory_bytes ?? 0), 0);
  const gpuTotals = new Map<string, number>();
  for (const a of ready)
    for (const [t, n] of Object.entries(a.capacity?.gpus.counts ?? {}))
      gpuTotals.set(t, (gpuTotals.get(t) ?? 0) + n);
  return html`
    <section data-testid="fleet-page">
      <h2>Fleet</h2>
      <${ErrorNote} error=${error} />
      <p class="summary">
        ${ready.length} of ${agents.length} agents ready · ${totalCpu} CPUs · ${bytes(totalMem)} memory · GPUs:
        ${gpuTotals.size === 0 ? " none" : [...gpuTotals].map(([t, n]) => ` ${n}× ${t}`).join(",")}
      </p>
      <table>
        <thead><tr><th>host</th><th>pool</th><th>state</th><th>CPUs</th><th>memory</th><th>GPUs</th><th>version</th><th>last seen</th><th>id</th></tr></thead>
        <tbody>
          ${agents.map(
            (a) => html`<tr data-testid="agent-row">
              <td class="host">${a.hostname}</td>
              <td>${a.pool ?? "–"}</td>
              <td><span class=${`state state-${a.state}`}>${a.state}</span></td>
              <td>${a.capacity?.cpu_cores ?? "–"}</td>
              <td>${bytes(a.capacity?.memory_bytes)}</td>
              <td>${gpus(a)}</td>
              <td>${a.version}</td>
              <td>${when(a.last_seen_at)}</td>
              <td class="mono">${a.id}</td>
            </tr>`,
          )}
        </tbody>
      </table>
      ${data && agents.length === 0 ? html`<p class="muted">No agent has joined yet.</p>` : null}
    </section>`;
}
