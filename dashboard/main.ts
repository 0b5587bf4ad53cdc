// The dashboard's entry: the token login, the navigation and the hash
// routes (#/fleet, #/deployments[/ID], #/tasks[/ID], #/containers, #/logs,
// #/metrics, #/events, #/limits, #/usage), so
// the coordinator serves one page at `/` and the API stays the only data path.

import { html, render } from "htm/preact";
import { useEffect, useState } from "preact/hooks";
import {
  ApiError,
  api,
  forgetToken,
  saveToken,
  savedToken,
  signOutSession,
  ssoEnabled,
  type Workspace,
} from "./api.ts";
import { parseHash } from "./format.ts";
import { ContainersPage } from "./pages/containers.ts";
import { DeploymentPage, DeploymentsPage } from "./pages/deployments.ts";
import { FleetPage } from "./pages/fleet.ts";
import { LogsPage } from "./pages/logs.ts";
import { MetricsPage } from "./pages/metrics.ts";
import { TaskPage, TasksPage } from "./pages/tasks.ts";
import { UsagePage } from "./pages/usage.ts";
import { EventsPage, LimitsPage } from "./pages/workspace.ts";

function Login({ onLogin, note }: { onLogin: (ws: Workspace) => void; note: string | null }) {
  const [token, setToken] = useState("");
  const [remember, setRemember] = useState(false);
  const [error, setError] = useState<string | null>(note);
  const [sso, setSso] = useState(false);
  useEffect(() => {
    void ssoEnabled().then(setSso);
  }, []);
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      const ws = await api<Workspace>("/api/v1/workspace/current", {}, token.trim());
      saveToken(token.trim(), remember);
      onLogin(ws);
    } catch (err) {
      setError(
        err instanceof ApiError && err.status === 401 ? "That token is not valid." : (err as Error).message,
      );
    }
  };
  return html`
    <main class="login">
      <h1>berth</h1>
      <form onSubmit=${submit} data-testid="login-form">
        <label>API token<br />
          <input type="password" name="token" autocomplete="off" required value=${token}
            onInput=${(e: Event) => setToken((e.target as HTMLInputElement).value)} />
        </label>
        <label><input type="checkbox" checked=${remember}
          onChange=${(e: Event) => setRemember((e.target as HTMLInputElement).checked)} /> remember on this browser</label>
        <button type="submit">Sign in</button>
        ${error ? html`<p class="error" role="alert">${error}</p>` : null}
      </form>
      <p class="muted">A workspace token (<code>berth up</code> prints the admin token; <code>berth token create</code> makes more).</p>
      ${sso ? html`<p><a href="/auth/login" class="button" data-testid="sso-login">Sign in with single sign-on</a></p>` : null}
    </main>`;
}

const NAV = [
  ["/fleet", "Fleet"],
  ["/deployments", "Deployments"],
  ["/tasks", "Tasks"],
  ["/containers", "Containers"],
  ["/logs", "Logs"],
  ["/metrics", "Metrics"],
  ["/events", "Events & webhooks"],
  ["/limits", "Limits"],
  ["/usage", "Usage"],
] as const;

function Page({ ws, path, query }: { ws: string; path: string; query: URLSearchParams }) {
  const [, top, id] = path.split("/").map(decodeURIComponent);
  switch (top) {
    case "fleet":
      return html`<${FleetPage} />`;
    case "deployments":
      return id ? html`<${DeploymentPage} ws=${ws} id=${id} />` : html`<${DeploymentsPage} ws=${ws} />`;
    case "tasks":
      return id ? html`<${TaskPage} ws=${ws} id=${id} />` : html`<${TasksPage} ws=${ws} query=${query} />`;
    case "containers":
      return html`<${ContainersPage} ws=${ws} />`;
    case "logs":
      return html`<${LogsPage} ws=${ws} query=${query} />`;
    case "metrics":
      return html`<${MetricsPage} ws=${ws} query=${query} />`;
    case "events":
      return html`<${EventsPage} ws=${ws} />`;
    case "limits":
      return html`<${LimitsPage} ws=${ws} />`;
    case "usage":
      return html`<${UsagePage} ws=${ws} />`;
    default:
      return html`<p>No page here. <a href="#/fleet">The fleet</a>.</p>`;
  }
}

function App() {
  const [ws, setWs] = useState<Workspace | null>(null);
  // Without a saved token, a single sign-on session's cookie may still sign this page in.
  const [checking, setChecking] = useState(true);
  const [note, setNote] = useState<string | null>(null);
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const on = () => setHash(location.hash);
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  useEffect(() => {
    const saved = savedToken() !== null;
    api<Workspace>("/api/v1/workspace/current")
      .then(setWs)
      .catch((e) => {
        if (!saved && e instanceof ApiError && e.status === 401) return;
        forgetToken();
        setNote(
          e instanceof ApiError && e.status === 401 ? "The saved token is no longer valid." : e.message,
        );
      })
      .finally(() => setChecking(false));
  }, []);
  if (checking) return html`<p class="muted">Loading…</p>`;
  if (!ws) return html`<${Login} onLogin=${setWs} note=${note} />`;
  const { path, query } = parseHash(hash);
  return html`
    <header>
      <strong>berth</strong>
      <nav>
        ${NAV.map(([p, label]) => html`<a href=${`#${p}`} class=${path.startsWith(p) ? "active" : ""}>${label}</a>`)}
      </nav>
      <span class="ws" data-testid="workspace">${ws.name} <small class="mono">${ws.external_id}</small></span>
      <button class="link" onClick=${async () => {
        if (savedToken() === null) await signOutSession();
        forgetToken();
        setWs(null);
      }}>Sign out</button>
    </header>
    <main><${Page} ws=${ws.external_id} path=${path} query=${query} /></main>`;
}

render(html`<${App} />`, document.getElementById("app") as HTMLElement);
