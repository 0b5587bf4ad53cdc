// Single sign-on end to end (docs/sso.md) against a real OpenID provider on
// loopback (test/sso/idp.ts): the dashboard's code flow with PKCE in headless
// chromium, `berth login` by the device flow (its user-code page completed in
// the browser), the operator's group mapping, revoked and expired sessions.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { after, before, describe, test, type TestContext } from "node:test";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";
import { DEFAULT_DASHBOARD_DIR } from "../../coordinator/dashboard/routes.ts";
import { createSso } from "../../coordinator/sso/index.ts";
import type { ChangeRecorder } from "../../coordinator/http/index.ts";
import { ROOT, buildDashboard, newestSourceMtime } from "../../scripts/build-dashboard.ts";
import { bearer } from "../helpers/auth.ts";
import { tempDir, unavailable } from "../helpers/env.ts";
import { type HttpHarness, startHttpHarness } from "../http/harness.ts";
import { startIdp, type TestIdp } from "./idp.ts";

/** Debian's chromium: the real binary behind the /usr/bin/chromium wrapper script. */
const CHROMIUM = ["/usr/lib/chromium/chromium", "/usr/bin/chromium"].find((p) => existsSync(p));
const WAIT = { timeout: 60_000 };

const USERS = [
  { login: "alice", email: "alice@example.org", groups: ["team-a-devs"] },
  { login: "bob", email: "bob@example.org", groups: ["team-a-viewers", "team-b"] },
  { login: "carol", email: "carol@example.org", groups: ["sales"] },
];

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Clicks through the provider's pages (its login form as `login`, then consent) until it lets go. */
async function throughProvider(page: Page, issuer: string, login: string): Promise<void> {
  for (let step = 0; step < 8 && page.url().startsWith(issuer); step++) {
    const before = page.url();
    // Its buttons may sit outside their form (form="..."); the device page's abort button is not ours.
    const submit = page.locator("[type=submit]:not([name=abort])").first();
    if ((await page.locator("input[name=login]").count()) > 0) {
      await page.fill("input[name=login]", login);
      await page.fill("input[name=password]", "any password");
    } else if ((await submit.count()) === 0) {
      return; // a page without a button: the provider's "done" page (device flow)
    }
    await Promise.all([
      page.waitForURL((u) => u.href !== before, WAIT).catch(() => undefined),
      submit.click(),
    ]);
    await page.waitForLoadState("load");
  }
}

describe("single sign-on against a real OpenID provider", () => {
  let idp: TestIdp;
  let x: HttpHarness;
  let base: string;
  let browser: Browser | undefined;
  const cleanups: (() => unknown)[] = [];
  const hooks = { after: (fn: () => unknown) => cleanups.push(fn) };
  let audit: ChangeRecorder | undefined;

  after(async () => {
    for (const fn of cleanups.reverse()) await fn();
  });

  before(async () => {
    const port = await freePort();
    base = `http://127.0.0.1:${port}`;
    idp = await startIdp({ users: USERS, redirectUris: [`${base}/auth/callback`] });
    cleanups.push(() => idp.close());
    const index = join(DEFAULT_DASHBOARD_DIR, "index.html");
    if (!existsSync(index) || statSync(index).mtimeMs < newestSourceMtime()) {
      await buildDashboard(DEFAULT_DASHBOARD_DIR);
    }
    x = await startHttpHarness(hooks, {
      more: async (h) => ({
        routes: [
          createSso({
            oidc: {
              issuer: idp.issuer,
              clientId: idp.clientId,
              mappings: [
                { group: "team-a-devs", workspace: h.ws.name, role: "developer" },
                { group: "team-a-viewers", workspace: h.ws.name, role: "viewer" },
                { group: "team-b", workspace: h.otherWs.externalId, role: "developer" },
              ],
              sessionTtl: "1h",
            },
            publicUrl: base,
            tokens: h.store.tokens,
            workspaces: h.store.workspaces,
            audit: { record: async (c) => audit?.record(c) },
          }).routes,
        ],
        dashboard: { dir: DEFAULT_DASHBOARD_DIR },
      }),
    });
    audit = x.audit;
    await x.app.listen({ host: "127.0.0.1", port });
  });

  const call = (method: string, path: string, token: string) =>
    fetch(`${base}${path}`, { method, headers: bearer(token) });

  async function needBrowser(t: TestContext): Promise<Browser | undefined> {
    if (!CHROMIUM) {
      unavailable(t, "needs Debian's chromium (run scripts/ensure-deps.sh test as root)");
      return undefined;
    }
    if (!browser) {
      browser = await chromium.launch({
        executablePath: CHROMIUM,
        headless: true,
        // Root has no user namespace sandbox for chromium; the pages are our own, on loopback.
        args: ["--no-sandbox", "--disable-dev-shm-usage"],
      });
      const b = browser;
      cleanups.push(() => b.close());
    }
    return browser;
  }

  /** Signs `login` in to the dashboard in a fresh browser context; answers the context and page. */
  async function dashboardLogin(b: Browser, login: string): Promise<{ ctx: BrowserContext; page: Page }> {
    const ctx = await b.newContext();
    cleanups.push(() => ctx.close());
    const page = await ctx.newPage();
    await page.goto(`${base}/`);
    await page.locator("[data-testid=sso-login]").waitFor(WAIT);
    await Promise.all([
      page.waitForURL((u) => u.href.startsWith(idp.issuer), WAIT),
      page.click("[data-testid=sso-login]"),
    ]);
    await throughProvider(page, idp.issuer, login);
    return { ctx, page };
  }

  test("the dashboard signs in by the code flow with PKCE and sees its workspace", async (t) => {
    const b = await needBrowser(t);
    if (!b) return;
    const { ctx, page } = await dashboardLogin(b, "alice");
    await page.locator("[data-testid=workspace]", { hasText: x.a.name }).waitFor(WAIT);
    const cookie = (await ctx.cookies(base)).find((c) => c.name === "berth_session");
    assert.ok(cookie, "the session cookie is set");
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, "Lax");
    assert.equal(cookie.secure, false, "served over plain http on loopback");
    // The dashboard's API calls work with the cookie: its deployments page lists A's deployment.
    await page.goto(`${base}/#/deployments`);
    await page.locator("text=canary-web").first().waitFor(WAIT);
    // A change with the cookie but without the dashboard's CSRF header is refused.
    const csrf = await page.evaluate(async (url) => {
      const r = await fetch(url, {
        method: "POST",
        body: "{}",
        headers: { "content-type": "application/json" },
      });
      return { status: r.status, body: await r.text() };
    }, `/api/v1/token`);
    assert.equal(csrf.status, 403, csrf.body);
    assert.match(csrf.body, /x-berth-csrf/);
    // The session is alice's, a developer of A, and recorded as a sign-in.
    const session = await page.evaluate(async () => (await fetch("/api/v1/session/current")).json());
    assert.equal(session.session.role, "developer");
    assert.equal(session.session.name, "sso:alice@example.org");
    // Signing out revokes the session: the cookie no longer works.
    const secret = cookie.value;
    await page.click("text=Sign out");
    await page.locator("[data-testid=sso-login]").waitFor(WAIT);
    assert.equal((await call("GET", "/api/v1/workspace/current", decodeURIComponent(secret))).status, 401);
  });

  test("a user in no mapped group is refused, naming the groups the config knows", async (t) => {
    const b = await needBrowser(t);
    if (!b) return;
    const { page } = await dashboardLogin(b, "carol");
    const msg = await page.locator("[data-testid=sso-error]").textContent(WAIT);
    assert.match(msg ?? "", /carol@example\.org is in no group/);
    assert.match(msg ?? "", /sales/);
    assert.match(msg ?? "", /team-a-devs, team-a-viewers, team-b/);
  });

  test("berth login by the device flow; the group mapping's role is honoured; revoked and expired sessions are refused", async (t) => {
    const b = await needBrowser(t);
    if (!b) return;
    const home = tempDir(hooks, "berth-sso-cli-");
    const config = join(home, "config.json");
    const child = spawn(
      process.execPath,
      ["--import", "tsx", join(ROOT, "cli", "main.ts"), "login", "--url", base, "--profile", "sso"],
      {
        cwd: ROOT,
        env: { ...process.env, HOME: home, BERTH_CONFIG: config },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    cleanups.push(() => child.exitCode === null && child.kill());
    let out = "";
    let err = "";
    child.stderr.on("data", (d) => {
      err += d;
    });
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
    const verifyUrl = await new Promise<string>((resolve, reject) => {
      child.stdout.on("data", (d) => {
        out += d;
        const m = /or open (\S+)/.exec(out);
        if (m?.[1]) resolve(m[1]);
      });
      void exited.then((code) => reject(new Error(`berth login exited ${code} early: ${out}\n${err}`)));
    });
    assert.ok(verifyUrl.startsWith(idp.issuer), verifyUrl);
    const ctx = await b.newContext();
    cleanups.push(() => ctx.close());
    const page = await ctx.newPage();
    await page.goto(verifyUrl);
    await throughProvider(page, idp.issuer, "bob");
    assert.equal(await exited, 0, `berth login: ${out}\n${err}`);
    assert.match(out, /signed in as bob@example\.org: viewer in workspace tasks-main/);
    const token = (
      JSON.parse(readFileSync(config, "utf8")) as { profiles: Record<string, { token: string; url: string }> }
    ).profiles.sso;
    assert.ok(token?.token.startsWith("bss_"), "the session is saved in the profile");
    assert.ok(token);
    assert.equal(token.url, base);
    const bobA = token.token;

    // bob's groups make him a viewer of A: he reads, but cannot change a deployment.
    assert.equal((await call("GET", `/api/v1/deployment/${x.a.externalId}`, bobA)).status, 200);
    const denied = await call(
      "POST",
      `/api/v1/deployment/${x.a.externalId}/stop/${x.seeded.deployment.id}`,
      bobA,
    );
    assert.equal(denied.status, 403, await denied.text());
    // Another workspace stays not found.
    assert.equal((await call("GET", `/api/v1/deployment/${x.b.externalId}`, bobA)).status, 404);

    // An admin of A lists the sessions and revokes bob's: his next call is 401.
    const admin = (await x.h.store.tokens.create(x.a.id, { name: "ops", role: "admin" })).secret;
    const listed = (await (await call("GET", "/api/v1/session", admin)).json()) as {
      sessions: { id: string; name: string; role: string }[];
    };
    const bobs = listed.sessions.find((s) => s.name === "sso:bob@example.org");
    assert.ok(bobs, JSON.stringify(listed));
    assert.equal(bobs.role, "viewer");
    assert.equal((await call("GET", "/api/v1/session", bobA)).status, 403, "a viewer lists no sessions");
    const revoked = await call("DELETE", `/api/v1/session/${bobs.id}`, admin);
    assert.equal(revoked.status, 200, await revoked.text());
    assert.equal((await call("GET", "/api/v1/workspace/current", bobA)).status, 401);
    // The sign-in and the revocation are in A's audit trail.
    const trail = (await (await call("GET", `/api/v1/audit/${x.a.externalId}?limit=100`, admin)).json()) as {
      records: { action: string; object_id: string | null; outcome: string }[];
    };
    assert.ok(trail.records.some((r) => r.action === "session.create" && r.object_id === bobs.id));
    assert.ok(
      trail.records.some(
        (r) => r.action === "session.revoke" && r.object_id === bobs.id && r.outcome === "ok",
      ),
    );
  });

  test("the ID token exchange refuses a forged token; an expired session is refused", async () => {
    // An ID token the provider did not sign is refused.
    const [h, p] = [
      '{"alg":"RS256"}',
      JSON.stringify({ iss: idp.issuer, aud: idp.clientId, sub: "bob" }),
    ].map((s) => Buffer.from(s).toString("base64url"));
    const forged = await fetch(`${base}/api/v1/auth/session`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ id_token: `${h}.${p}.c2ln` }),
    });
    assert.equal(forged.status, 401, await forged.text());
    // The public config names the provider and the device flow's client.
    const cfg = (await (await fetch(`${base}/api/v1/auth/config`)).json()) as {
      enabled: boolean;
      issuer: string;
    };
    assert.equal(cfg.enabled, true);
    assert.equal(new URL(cfg.issuer).origin, idp.issuer);
    // A session past its expiry is refused like a revoked token.
    const { secret, record } = await x.h.store.tokens.createSession(x.a.id, {
      name: "sso:late@example.org",
      role: "developer",
      subject: "late",
      expiresAt: new Date(Date.now() + 3600_000),
    });
    assert.equal((await call("GET", "/api/v1/workspace/current", secret)).status, 200);
    await x.h.store.db
      .updateTable("tokens")
      .set({ expires_at: new Date(Date.now() - 1000).toISOString() })
      .where("id", "=", record.id)
      .execute();
    assert.equal((await call("GET", "/api/v1/workspace/current", secret)).status, 401);
  });

  test("berth logout revokes the profile's session and forgets it", async () => {
    const home = tempDir(hooks, "berth-sso-logout-");
    const config = join(home, "config.json");
    const { secret } = await x.h.store.tokens.createSession(x.a.id, {
      name: "sso:erin@example.org",
      role: "viewer",
      subject: "erin",
      expiresAt: new Date(Date.now() + 3600_000),
    });
    writeFileSync(config, JSON.stringify({ profiles: { sso: { url: base, token: secret } } }));
    const run = (args: string[]) =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const c = spawn(process.execPath, ["--import", "tsx", join(ROOT, "cli", "main.ts"), ...args], {
          cwd: ROOT,
          env: { ...process.env, HOME: home, BERTH_CONFIG: config },
        });
        let out = "";
        c.stdout.on("data", (d) => {
          out += d;
        });
        c.stderr.on("data", (d) => {
          out += d;
        });
        c.on("exit", (code) => resolve({ code, out }));
      });
    const r = await run(["logout", "--profile", "sso"]);
    assert.equal(r.code, 0, r.out);
    assert.equal((await call("GET", "/api/v1/workspace/current", secret)).status, 401);
    const saved = JSON.parse(readFileSync(config, "utf8")) as { profiles: Record<string, object> };
    assert.deepEqual(saved.profiles.sso, { url: base });
    const again = await run(["logout", "--profile", "sso"]);
    assert.equal(again.code, 1);
    assert.match(again.out, /profile sso has no token/);
  });
});
