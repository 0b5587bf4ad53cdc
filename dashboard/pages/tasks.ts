// Tasks: the list with a status filter, and one task's history, cost,
// outputs and log lines, followed until the task ends.

import { html } from "htm/preact";
import { TASK_STATUSES, TERMINAL_STATUSES, type TaskStatus } from "../../shared/tasks.ts";
import { api, type TaskDetails, type TaskSummary } from "../api.ts";
import { bytes, duration, when } from "../format.ts";
import { ErrorNote, usePoll } from "../hooks.ts";
import { LogView } from "./logs.ts";

const statusBadge = (s: string) => html`<span class=${`status status-${s}`} data-testid="task-status">${s}</span>`;
const cost = (t: Pick<TaskSummary, "cost">) =>
  t.cost ? `${t.cost.estimate.toFixed(4)}${t.cost.currency ? ` ${t.cost.currency}` : ""}` : "–";

function setQuery(key: string, value: string) {
  const q = new URLSearchParams(location.hash.split("?")[1] ?? "");
  if (value) q.set(key, value);
  else q.delete(key);
  location.hash = `#/tasks${q.size ? `?${q}` : ""}`;
}

export function TasksPage({ ws, query }: { ws: string; query: URLSearchParams }) {
  const q = new URLSearchParams({ limit: "100" });
  for (const k of ["status", "deployment_id", "stub_id"]) {
    const v = query.get(k);
    if (v) q.set(k, v);
  }
  const { data, error } = usePoll(
    () => api<{ tasks: TaskSummary[] }>(`/api/v1/task/${encodeURIComponent(ws)}?${q}`),
    `tasks-${q}`,
  );
  return html`
    <section data-testid="tasks-page">
      <h2>Tasks</h2>
      <form class="filters" onSubmit=${(e: Event) => e.preventDefault()}>
        <label>status
          <select data-testid="status-filter" value=${query.get("status") ?? ""}
            onChange=${(e: Event) => setQuery("status", (e.target as HTMLSelectElement).value)}>
            <option value="">any</option>
            ${TASK_STATUSES.map((s) => html`<option value=${s}>${s}</option>`)}
          </select>
        </label>
        ${query.get("deployment_id") ? html`<span>deployment ${query.get("deployment_id")} <a href="#/tasks">(all)</a></span>` : null}
      </form>
      <${ErrorNote} error=${error} />
      <table>
        <thead><tr><th>task</th><th>status</th><th>function</th><th>created</th><th>duration</th><th>cost</th></tr></thead>
        <tbody>
          ${(data?.tasks ?? []).map(
            (t) => html`<tr data-testid="task-row">
              <td class="mono"><a href=${`#/tasks/${encodeURIComponent(t.id)}`}>${t.id}</a></td>
              <td>${statusBadge(t.status)}</td>
              <td>${t.stub.name} <small>${t.stub.type}</small></td>
              <td>${when(t.created_at)}</td>
              <td>${duration(t.started_at, t.ended_at)}</td>
              <td>${cost(t)}</td>
            </tr>`,
          )}
        </tbody>
      </table>
      ${data && data.tasks.length === 0 ? html`<p class="muted">No tasks match.</p>` : null}
    </section>`;
}

export function TaskPage({ ws, id }: { ws: string; id: string }) {
  const { data: t, error } = usePoll(
    () => api<TaskDetails>(`/api/v1/task/${encodeURIComponent(ws)}/${encodeURIComponent(id)}`),
    `task-${id}`,
    2000,
  );
  const ended = t ? TERMINAL_STATUSES.has(t.status as TaskStatus) : false;
  return html`
    <section data-testid="task-page">
      <p><a href="#/tasks">← tasks</a></p>
      <${ErrorNote} error=${error} />
      ${
        t &&
        html`
        <h2 class="mono">${t.id} ${statusBadge(t.status)}</h2>
        <dl class="facts">
          <dt>function</dt><dd>${t.stub.name} (${t.stub.type})</dd>
          <dt>attempt</dt><dd>${t.history.at(-1)?.attempt ?? "–"}</dd>
          <dt>container</dt><dd class="mono">${t.container_id || "–"}</dd>
          <dt>created</dt><dd>${when(t.created_at)}</dd>
          <dt>started</dt><dd>${when(t.started_at)}</dd>
          <dt>ended</dt><dd>${when(t.ended_at)}</dd>
          <dt>duration</dt><dd>${duration(t.started_at, t.ended_at)}</dd>
          <dt>cost estimate</dt><dd>${cost(t)}</dd>
        </dl>
        <h3>History</h3>
        <ol class="history">
          ${t.history.map((h) => html`<li>${when(h.at)} ${statusBadge(h.status)} attempt ${h.attempt}${h.reason ? ` — ${h.reason}` : ""}</li>`)}
        </ol>
        <h3>Outputs</h3>
        ${
          t.outputs.length === 0
            ? html`<p class="muted">None.</p>`
            : html`<ul>${t.outputs.map((o) => html`<li class="mono">${o.name} (${bytes(o.size)})</li>`)}</ul>`
        }
        <h3>Logs</h3>
        <${LogView} ws=${ws} filter=${{ task_id: t.id }} follow=${!ended} />`
      }
    </section>`;
}
