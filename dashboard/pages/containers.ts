// The workspace's live containers: runners of functions and deployments,
// sandboxes and pods, with their state, host and stub.

import { html } from "htm/preact";
import { api } from "../api.ts";
import { when } from "../format.ts";
import { ErrorNote, usePoll } from "../hooks.ts";

interface Container {
  id: string;
  stub_id: string;
  agent_id: string;
  status: string;
  since: string;
  kind: "runner" | "sandbox" | "pod";
}

export function ContainersPage({ ws }: { ws: string }) {
  const { data, error } = usePoll(
    () => api<{ containers: Container[] }>(`/api/v1/container/${encodeURIComponent(ws)}?limit=500`),
    `containers-${ws}`,
  );
  return html`
    <section data-testid="containers-page">
      <h2>Containers <small>runners, sandboxes and pods</small></h2>
      <${ErrorNote} error=${error} />
      <table>
        <thead><tr><th>container</th><th>kind</th><th>status</th><th>since</th><th>stub</th><th>host</th></tr></thead>
        <tbody>
          ${(data?.containers ?? []).map(
            (c) => html`<tr data-testid="container-row">
              <td class="mono">${c.id}</td>
              <td>${c.kind}</td>
              <td><span class=${`state state-${c.status === "running" ? "ready" : "left"}`}>${c.status}</span></td>
              <td>${when(c.since)}</td>
              <td class="mono"><a href=${`#/logs?stub_id=${encodeURIComponent(c.stub_id)}`}>${c.stub_id}</a></td>
              <td class="mono">${c.agent_id}</td>
            </tr>`,
          )}
        </tbody>
      </table>
      ${data && data.containers.length === 0 ? html`<p class="muted">No containers run now.</p>` : null}
    </section>`;
}
