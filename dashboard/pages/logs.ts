// Container log lines: the LogView (also in a task's page) reads pages of
// GET /api/v1/logs/{ws} oldest first, then follows by asking again after the
// last line it has (the cursor) every two seconds.

import { html } from "htm/preact";
import { useEffect, useState } from "preact/hooks";
import { api, type LogLine } from "../api.ts";
import { ErrorNote } from "../hooks.ts";

const KEEP = 2000;
const FOLLOW_MS = 2000;

export interface LogFilter {
  stub_id?: string;
  container_id?: string;
  task_id?: string;
  text?: string;
  since?: string;
}

export function LogView({ ws, filter, follow }: { ws: string; filter: LogFilter; follow: boolean }) {
  const [lines, setLines] = useState<LogLine[]>([]);
  const [error, setError] = useState<string | null>(null);
  const key = JSON.stringify(filter);
  // `key` is the filter's value: a new object each render with the same filter must not restart the view.
  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let cursor: string | null = null;
    let got: LogLine[] = [];
    setLines([]);
    const q = new URLSearchParams({ limit: "1000" });
    for (const [k, v] of Object.entries(filter)) if (v) q.set(k, v);
    const readAll = async () => {
      for (;;) {
        if (cursor) q.set("cursor", cursor);
        const page = await api<{ lines: LogLine[]; next_cursor: string | null }>(
          `/api/v1/logs/${encodeURIComponent(ws)}?${q}`,
        );
        if (!live) return;
        got = got.concat(page.lines).slice(-KEEP);
        const last = page.lines.at(-1);
        if (last) cursor = last.id;
        if (page.next_cursor) cursor = page.next_cursor;
        else break;
      }
      setLines(got);
    };
    const run = async () => {
      try {
        await readAll();
        if (live) setError(null);
      } catch (e) {
        if (live) setError((e as Error).message);
      }
      if (live && follow) timer = setTimeout(run, FOLLOW_MS);
    };
    void run();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [ws, key, follow]);
  return html`
    <div>
      <${ErrorNote} error=${error} />
      <pre class="logs" data-testid="log-lines">${lines.map(
        (l) =>
          html`<div class=${`log log-${l.stream}`} data-testid="log-line"><span class="ts">${new Date(l.timestamp).toLocaleTimeString()}</span> <span class="ctr">${l.container_id.slice(0, 16)}</span>${l.task_id ? html` <a href=${`#/tasks/${encodeURIComponent(l.task_id)}`}>${l.task_id.slice(0, 16)}</a>` : null} ${l.line}</div>`,
      )}</pre>
      ${lines.length === 0 ? html`<p class="muted">No lines${follow ? " yet" : ""}.</p>` : null}
    </div>`;
}

export function LogsPage({ ws, query }: { ws: string; query: URLSearchParams }) {
  const [text, setText] = useState(query.get("text") ?? "");
  const [stub, setStub] = useState(query.get("stub_id") ?? "");
  const [follow, setFollow] = useState(true);
  // The last hour, as `berth logs` shows by default; fixed when the page opens so following keeps one cursor.
  const [since] = useState(() => new Date(Date.now() - 3600_000).toISOString());
  const filter: LogFilter = { since, ...(text ? { text } : {}), ...(stub ? { stub_id: stub } : {}) };
  return html`
    <section data-testid="logs-page">
      <h2>Logs</h2>
      <form class="filters" onSubmit=${(e: Event) => e.preventDefault()}>
        <label>text <input value=${text} onChange=${(e: Event) => setText((e.target as HTMLInputElement).value)} /></label>
        <label>stub <input value=${stub} onChange=${(e: Event) => setStub((e.target as HTMLInputElement).value)} /></label>
        <label><input type="checkbox" checked=${follow} onChange=${(e: Event) => setFollow((e.target as HTMLInputElement).checked)} /> follow</label>
      </form>
      <${LogView} ws=${ws} filter=${filter} follow=${follow} />
    </section>`;
}
