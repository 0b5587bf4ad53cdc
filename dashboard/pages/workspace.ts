// The workspace's events (the last hour's CloudEvents, newest first), its
// webhooks with their recent deliveries, and its limits beside what it uses
// now.

import { html } from "htm/preact";
import { useState } from "preact/hooks";
import { api } from "../api.ts";
import { when } from "../format.ts";
import { ErrorNote, usePoll } from "../hooks.ts";

interface CloudEvent {
  id: string;
  type: string;
  subject: string;
  time: string;
  data: Record<string, unknown>;
}

interface Webhook {
  id: string;
  url: string;
  event_types: string[];
  description: string;
  enabled: boolean;
}

interface Delivery {
  id: string;
  event_type: string;
  status_code: number | null;
  error: string | null;
  ok: boolean;
  duration_ms: number;
  attempted_at: string;
}

function Deliveries({ ws, id }: { ws: string; id: string }) {
  const { data, error } = usePoll(
    () =>
      api<{ deliveries: Delivery[] }>(
        `/api/v1/webhook/${encodeURIComponent(ws)}/${encodeURIComponent(id)}/deliveries?limit=20`,
      ),
    `deliveries-${id}`,
  );
  if (error) return html`<${ErrorNote} error=${error} />`;
  if (data && data.deliveries.length === 0) return html`<p class="muted">No deliveries yet.</p>`;
  return html`<ul class="deliveries">
    ${(data?.deliveries ?? []).map(
      (d) => html`<li>${when(d.attempted_at)} ${d.event_type}
        <span class=${`state state-${d.ok ? "ready" : "lost"}`}>${d.status_code ?? d.error ?? "no answer"}</span>
        ${d.duration_ms} ms</li>`,
    )}
  </ul>`;
}

function Webhooks({ ws }: { ws: string }) {
  const { data, error } = usePoll(
    () => api<{ webhooks: Webhook[] }>(`/api/v1/webhook/${encodeURIComponent(ws)}?limit=100`),
    `webhooks-${ws}`,
  );
  const [open, setOpen] = useState<string | null>(null);
  return html`
    <h3>Webhooks</h3>
    <${ErrorNote} error=${error} />
    <table>
      <thead><tr><th>URL</th><th>events</th><th>enabled</th><th>description</th><th></th></tr></thead>
      <tbody>
        ${(data?.webhooks ?? []).map(
          (w) => html`<tr data-testid="webhook-row">
              <td class="mono">${w.url}</td><td>${w.event_types.join(", ") || "all"}</td>
              <td>${w.enabled ? "yes" : "no"}</td><td>${w.description}</td>
              <td><button onClick=${() => setOpen(open === w.id ? null : w.id)}>deliveries</button></td>
            </tr>
            ${open === w.id ? html`<tr><td colspan="5"><${Deliveries} ws=${ws} id=${w.id} /></td></tr>` : null}`,
        )}
      </tbody>
    </table>
    ${data && data.webhooks.length === 0 ? html`<p class="muted">No webhooks (docs/webhooks.md).</p>` : null}`;
}

export function EventsPage({ ws }: { ws: string }) {
  const { data, error } = usePoll(async () => {
    const after = new Date(Date.now() - 3600_000).toISOString();
    let events: CloudEvent[] = [];
    let cursor: string | null = null;
    // Oldest first, a page at a time: read the hour, keep the newest 500.
    do {
      const q = new URLSearchParams({ after, limit: "500", ...(cursor ? { cursor } : {}) });
      const page: { events: CloudEvent[]; next_cursor: string | null } = await api(
        `/api/v1/events/${encodeURIComponent(ws)}/history?${q}`,
      );
      events = events.concat(page.events).slice(-500);
      cursor = page.next_cursor;
    } while (cursor);
    return events.reverse();
  }, `events-${ws}`);
  return html`
    <section data-testid="events-page">
      <h2>Events <small>the last hour</small></h2>
      <${ErrorNote} error=${error} />
      <table>
        <thead><tr><th>time</th><th>type</th><th>subject</th><th>data</th></tr></thead>
        <tbody>
          ${(data ?? []).map(
            (e) => html`<tr data-testid="event-row">
              <td>${when(e.time)}</td><td>${e.type}</td><td class="mono">${e.subject}</td>
              <td class="mono">${JSON.stringify(e.data).slice(0, 200)}</td>
            </tr>`,
          )}
        </tbody>
      </table>
      ${data && data.length === 0 ? html`<p class="muted">No events in the last hour.</p>` : null}
      <${Webhooks} ws=${ws} />
    </section>`;
}

interface Limits {
  limits: Record<string, number | null> & {
    isolation?: string | null;
    user_namespace?: boolean;
    syscall_filter?: string;
    max_gpus_by_type?: Record<string, number> | null;
  };
  usage: Record<string, number> & { gpus_by_type?: Record<string, number> };
}

/** Each limit and the usage figure it caps. */
const ROWS: [limit: string, usage: string, unit: string][] = [
  ["max_containers", "containers", ""],
  ["max_cpu_millicores", "cpu_millicores", "millicores"],
  ["max_memory_mb", "memory_mb", "MiB"],
  ["max_gpus", "gpus", ""],
  ["max_pending_tasks", "pending_tasks", ""],
  ["max_queue_items", "queue_items", ""],
  ["max_volume_mb", "volume_mb", "MiB"],
  ["max_inference_requests", "inference_requests", ""],
  ["max_tokens_per_minute", "tokens_last_minute", "tokens"],
  ["gpu_hours_per_month", "gpu_hours_this_month", "GPU-hours"],
  ["cpu_hours_per_month", "cpu_hours_this_month", "CPU-hours"],
  ["v1_tokens_per_month", "v1_tokens_this_month", "tokens"],
];

/** "A100: 1 of 2, H100: 0 of 1": each GPU type's limit and what its containers hold. */
function byType(
  limits: Record<string, number> | null | undefined,
  used: Record<string, number> = {},
): string {
  const types = [...new Set([...Object.keys(limits ?? {}), ...Object.keys(used)])].sort();
  if (types.length === 0) return "none";
  return types.map((t) => `${t}: ${used[t] ?? 0} of ${limits?.[t] ?? "no limit"}`).join(", ");
}

export function LimitsPage({ ws }: { ws: string }) {
  const { data, error } = usePoll(
    () => api<Limits>(`/api/v1/workspace/${encodeURIComponent(ws)}/limits`),
    `limits-${ws}`,
  );
  return html`
    <section data-testid="limits-page">
      <h2>Limits</h2>
      <${ErrorNote} error=${error} />
      ${
        data &&
        html`<table>
          <thead><tr><th>limit</th><th>in use</th><th>maximum</th></tr></thead>
          <tbody>
            ${ROWS.map(
              ([limit, usage, unit]) => html`<tr data-testid="limit-row">
                <td>${limit}</td><td>${data.usage[usage] ?? "–"} ${unit}</td>
                <td>${data.limits[limit] ?? "none"}${data.limits[limit] !== null && data.limits[limit] !== undefined ? ` ${unit}` : ""}</td>
              </tr>`,
            )}
            <tr data-testid="limit-row">
              <td>max_gpus_by_type</td>
              <td colspan="2">${byType(data.limits.max_gpus_by_type, data.usage.gpus_by_type)}</td>
            </tr>
            <tr data-testid="limit-row">
              <td>isolation</td>
              <td colspan="2">${data.limits.isolation ?? "each stub's own"}</td>
            </tr>
            <tr data-testid="limit-row">
              <td>user_namespace</td>
              <td colspan="2">${data.limits.user_namespace === false ? "off: root inside is the host's root" : "on"}</td>
            </tr>
            <tr data-testid="limit-row">
              <td>syscall_filter</td>
              <td colspan="2">${data.limits.syscall_filter ?? "allowlist"}</td>
            </tr>
          </tbody>
        </table>
        <p class="muted">An admin changes them with <code>PUT /api/v1/workspace/{ws}/limits</code> (docs/limits.md).</p>`
      }
    </section>`;
}
