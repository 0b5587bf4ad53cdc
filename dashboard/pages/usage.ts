// The workspace's usage for chargeback (docs/usage.md): a window and a
// split chosen on the page, the rows and totals the usage report route
// answers, and its CSV to download.

import { html } from "htm/preact";
import { useState } from "preact/hooks";
import { api, authHeaders } from "../api.ts";
import { ErrorNote, usePoll } from "../hooks.ts";
import type { UsageFigures as Figures, UsageReport as Report } from "../../shared/usage.ts";

const today = () => new Date().toISOString().slice(0, 10);
const monthStart = () => `${today().slice(0, 8)}01`;

const cells = (f: Figures) => html`
  <td>${f.tasks + f.sandboxes}</td><td>${f.run_seconds}</td><td>${f.cpu_seconds}</td>
  <td>${f.memory_gib_seconds}</td><td>${f.gpu_seconds}</td>
  <td>${Object.entries(f.gpu_seconds_by_type)
    .map(([t, s]) => `${t}=${s}`)
    .join(" ")}</td>
  <td>${f.total_tokens}</td>`;

export function UsagePage({ ws }: { ws: string }) {
  const [from, setFrom] = useState(monthStart());
  const [to, setTo] = useState(today());
  const [by, setBy] = useState("day");
  const q = new URLSearchParams({ from, to, by });
  const path = `/api/v1/usage/${encodeURIComponent(ws)}/report?${q}`;
  const { data, error } = usePoll(() => api<Report>(path), `usage-${path}`, 30_000);
  const download = async () => {
    const r = await fetch(`${path}&format=csv`, { headers: authHeaders() });
    const a = document.createElement("a");
    a.href = URL.createObjectURL(await r.blob());
    a.download = `usage-${ws}-${from}-${to}.csv`;
    a.click();
    URL.revokeObjectURL(a.href);
  };
  const input = (set: (v: string) => void) => (e: Event) => set((e.target as HTMLInputElement).value);
  const key = (r: Report["rows"][number]) =>
    by === "member"
      ? r.member
        ? r.member.name || r.member.id
        : "-"
      : by === "deployment"
        ? (r.deployment ?? "-")
        : r.day;
  return html`
    <section data-testid="usage-page">
      <h2>Usage <small>requested resources times run time; docs/usage.md</small></h2>
      <form class="filters" onSubmit=${(e: Event) => e.preventDefault()}>
        <label>from <input type="date" name="from" value=${from} onChange=${input(setFrom)} /></label>
        <label>to <input type="date" name="to" value=${to} onChange=${input(setTo)} /></label>
        <label>by <select name="by" value=${by} onChange=${input(setBy)}>
          <option value="day">day</option><option value="deployment">deployment</option><option value="member">member</option>
        </select></label>
        <button type="button" onClick=${download}>CSV</button>
      </form>
      <${ErrorNote} error=${error} />
      <table>
        <thead><tr><th>${by}</th><th>tasks</th><th>run s</th><th>CPU s</th><th>memory GiB·s</th>
          <th>GPU s</th><th>GPU s by type</th><th>/v1 tokens</th></tr></thead>
        <tbody>
          ${(data?.rows ?? []).map((r) => html`<tr data-testid="usage-row"><td>${key(r)}</td>${cells(r.usage)}</tr>`)}
          ${data ? html`<tr class="total"><td><strong>total</strong></td>${cells(data.totals)}</tr>` : null}
        </tbody>
      </table>
      ${data && data.rows.length === 0 ? html`<p class="muted">Nothing ran in this window.</p>` : null}
    </section>`;
}
