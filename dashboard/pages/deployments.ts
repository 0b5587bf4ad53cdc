// Deployments: the list (newest first), and one deployment's versions,
// status, URL, containers and queue, with stop/start.

import { html } from "htm/preact";
import { useState } from "preact/hooks";
import { api, type Deployment, type DeploymentDetails } from "../api.ts";
import { when } from "../format.ts";
import { ErrorNote, usePoll } from "../hooks.ts";

const status = (d: Deployment) =>
  html`<span class=${`state state-${d.active ? "ready" : "left"}`}>${d.active ? "active" : "stopped"}</span>`;

export function DeploymentsPage({ ws }: { ws: string }) {
  const { data, error } = usePoll(
    () => api<{ deployments: Deployment[] }>(`/api/v1/deployment/${encodeURIComponent(ws)}?limit=100`),
    `deployments-${ws}`,
  );
  return html`
    <section data-testid="deployments-page">
      <h2>Deployments</h2>
      <${ErrorNote} error=${error} />
      <table>
        <thead><tr><th>name</th><th>version</th><th>type</th><th>status</th><th>URL</th><th>updated</th></tr></thead>
        <tbody>
          ${(data?.deployments ?? []).map(
            (d) => html`<tr data-testid="deployment-row">
              <td><a href=${`#/deployments/${encodeURIComponent(d.id)}`}>${d.name}</a></td>
              <td>v${d.version}</td>
              <td>${d.type}</td>
              <td>${status(d)}</td>
              <td class="mono">${d.url || "–"}</td>
              <td>${when(d.updated_at)}</td>
            </tr>`,
          )}
        </tbody>
      </table>
      ${data && data.deployments.length === 0 ? html`<p class="muted">Nothing deployed yet: <code>berth deploy app.py:handler</code>.</p>` : null}
    </section>`;
}

export function DeploymentPage({ ws, id }: { ws: string; id: string }) {
  const base = `/api/v1/deployment/${encodeURIComponent(ws)}`;
  const dep = usePoll(() => api<DeploymentDetails>(`${base}/${encodeURIComponent(id)}`), `deployment-${id}`);
  const name = dep.data?.name;
  const versions = usePoll(
    () =>
      name
        ? api<{ deployments: Deployment[] }>(`${base}?name=${encodeURIComponent(name)}&limit=100`)
        : Promise.resolve({ deployments: [] }),
    `versions-${name ?? ""}`,
    0,
  );
  const [acting, setActing] = useState<string | null>(null);
  const act = async (what: "start" | "stop") => {
    setActing(what);
    try {
      await api(`${base}/${what}/${encodeURIComponent(id)}`, { method: "POST" });
    } catch (e) {
      alert((e as Error).message);
    }
    setActing(null);
    dep.reload();
  };
  const d = dep.data;
  return html`
    <section data-testid="deployment-page">
      <p><a href="#/deployments">← deployments</a></p>
      <${ErrorNote} error=${dep.error} />
      ${
        d &&
        html`
        <h2>${d.name} <small>v${d.version}</small> ${status(d)}</h2>
        <dl class="facts">
          <dt>id</dt><dd class="mono">${d.id}</dd>
          <dt>type</dt><dd>${d.type}</dd>
          <dt>URL</dt><dd class="mono" data-testid="deployment-url">${d.url || "–"}</dd>
          <dt>containers</dt><dd data-testid="deployment-containers">${d.containers}</dd>
          <dt>queue depth</dt><dd>${d.queue_depth}</dd>
          <dt>created</dt><dd>${when(d.created_at)}</dd>
          ${d.start_error ? html`<dt>start error</dt><dd class="error">${d.start_error}</dd>` : null}
        </dl>
        <p>
          ${
            d.active
              ? html`<button disabled=${acting !== null} onClick=${() => act("stop")}>Stop</button>`
              : html`<button disabled=${acting !== null} onClick=${() => act("start")}>Start</button>`
          }
          <a class="button" href=${`#/tasks?deployment_id=${encodeURIComponent(d.id)}`}>Its tasks</a>
          <a class="button" href=${`#/logs?stub_id=${encodeURIComponent(d.stub_id)}`}>Its logs</a>
        </p>
        <h3>Versions</h3>
        <table>
          <thead><tr><th>version</th><th>status</th><th>created</th><th>id</th></tr></thead>
          <tbody>
            ${(versions.data?.deployments ?? []).map(
              (v) => html`<tr>
                <td><a href=${`#/deployments/${encodeURIComponent(v.id)}`}>v${v.version}</a></td>
                <td>${status(v)}</td><td>${when(v.created_at)}</td><td class="mono">${v.id}</td>
              </tr>`,
            )}
          </tbody>
        </table>`
      }
    </section>`;
}
