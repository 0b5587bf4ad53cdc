// The dashboard end to end, in a real browser: Debian's chromium,
// headless, driven by playwright-core, against a real `berth up` cluster.
// An earlier step deploys a task queue with the CLI and enqueues a task; the
// browser logs in with the admin token, sees this host in the fleet, finds
// the deployment, follows the task to COMPLETE with its log lines, reads the
// logs page, sees a metrics plot, the task's events, the limits and the usage.
// Screenshots of the main pages go to test-results/dashboard/ (printed as a
// diagnostic). The dashboard is built
// first when dist/dashboard is missing or older than its sources.

import assert from "node:assert/strict";
import { existsSync, mkdirSync, statSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { type Browser, chromium, type Page } from "playwright-core";
import { DEFAULT_DASHBOARD_DIR } from "../../coordinator/dashboard/routes.ts";
import { ROOT, buildDashboard, newestSourceMtime } from "../../scripts/build-dashboard.ts";
import { bearer } from "../helpers/auth.ts";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs, unavailable } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const SHOTS = join(ROOT, "test-results", "dashboard");
/** Debian's chromium: the real binary behind the /usr/bin/chromium wrapper script. */
const CHROMIUM = ["/usr/lib/chromium/chromium", "/usr/bin/chromium"].find((p) => existsSync(p));
/** Long enough for a cold container start on a loaded machine; the waits end as soon as the page shows it. */
const WAIT = { timeout: 240_000 };

const MARKER = "dashboard-marker";
const app = `
import time
from berth import task_queue

@task_queue(name="dashjob", cpu=0.25, memory=128, keep_warm_seconds=600)
def dashjob(n: int):
    print(f"${MARKER} start {n}", flush=True)
    time.sleep(2)
    print(f"${MARKER} done {n * 2}", flush=True)
    return {"double": n * 2}
`;

/** Builds the dashboard unless dist/dashboard/index.html is newer than every source file. */
async function ensureBuilt(): Promise<void> {
  const index = join(DEFAULT_DASHBOARD_DIR, "index.html");
  if (existsSync(index) && statSync(index).mtimeMs >= newestSourceMtime()) return;
  await buildDashboard(DEFAULT_DASHBOARD_DIR);
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

test("the dashboard in headless chromium against a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  if (!CHROMIUM) {
    unavailable(t, "needs Debian's chromium (run scripts/ensure-deps.sh as root)");
    return;
  }
  const td = new Teardown(t);
  await ensureBuilt();
  mkdirSync(SHOTS, { recursive: true });
  t.diagnostic(`screenshots in ${SHOTS}`);

  const up = await startBerthUp(td);
  // The earlier step: a deployment made with the CLI, and a task of it.
  writeFileSync(join(up.appDir, "app.py"), app);
  const deployed = await up.cli(["deploy", "app.py:dashjob"]);
  assert.equal(deployed.code, 0, `berth deploy: ${deployed.stdout}\n${deployed.stderr}\n${up.output()}`);
  const enqueued = await fetch(`${up.url}/taskqueue/dashjob`, {
    method: "POST",
    headers: { "content-type": "application/json", ...bearer(up.token) },
    body: '{"n": 21}',
  });
  assert.equal(enqueued.status, 200, await enqueued.clone().text());
  const taskId = ((await enqueued.json()) as { task_id: string }).task_id;
  const wsId = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;

  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    // Root has no user namespace sandbox for chromium; the page is our own, on loopback.
    args: ["--no-sandbox", "--disable-dev-shm-usage"],
  });
  td.defer(() => browser.close());
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  const pageErrors: string[] = [];
  page.on("pageerror", (e) => pageErrors.push(e.message));

  await t.test("the login page refuses a wrong token and takes the admin token", async () => {
    await page.goto(`${up.url}/`);
    await page.fill("input[name=token]", "bt_not-a-real-token");
    await page.click("button[type=submit]");
    await page.locator("[role=alert]", { hasText: "not valid" }).waitFor(WAIT);
    await page.fill("input[name=token]", up.token);
    await page.click("button[type=submit]");
    await page.locator("[data-testid=workspace]").waitFor(WAIT);
    assert.equal(await page.evaluate(() => sessionStorage.getItem("berth.token")), up.token);
  });

  await t.test("the fleet shows this host, its pool, ready, with its CPUs and memory", async () => {
    await page.goto(`${up.url}/#/fleet`);
    const row = page.locator("[data-testid=agent-row]", { hasText: hostname() });
    await row.locator(".state-ready").waitFor(WAIT);
    const cells = await row.locator("td").allTextContents();
    assert.equal(cells[1], "default", `pool: ${cells.join(" | ")}`);
    assert.ok(Number(cells[3]) > 0, `CPUs: ${cells.join(" | ")}`);
    assert.match(cells[4] ?? "", /iB$/);
    await shot(page, "fleet");
  });

  await t.test("the deployment the earlier step made: version, status, URL", async () => {
    await page.click("header nav a[href='#/deployments']");
    await page.locator("[data-testid=deployment-row] a", { hasText: "dashjob" }).click();
    const url = page.locator("[data-testid=deployment-url]");
    await url.waitFor(WAIT);
    assert.match((await url.textContent()) ?? "", /\/taskqueue\/dashjob/);
    assert.match(
      (await page.locator("[data-testid=deployment-page] h2").textContent()) ?? "",
      /dashjob v1 active/,
    );
    await shot(page, "deployment");
  });

  await t.test("the task, followed to COMPLETE, with its log lines", async () => {
    await page.click("header nav a[href='#/tasks']");
    await page.locator("[data-testid=task-row] a", { hasText: taskId }).click();
    const status = page.locator("[data-testid=task-page] h2 [data-testid=task-status]");
    await page.waitForFunction(
      () =>
        document.querySelector("[data-testid=task-page] h2 [data-testid=task-status]")?.textContent ===
        "COMPLETE",
      undefined,
      WAIT,
    );
    assert.equal(await status.textContent(), "COMPLETE");
    await page.locator("[data-testid=log-line]", { hasText: `${MARKER} done 42` }).waitFor(WAIT);
    const lines = await page.locator("[data-testid=log-line]").allTextContents();
    assert.ok(
      lines.some((l) => l.includes(`${MARKER} start 21`)),
      lines.join("\n"),
    );
    await shot(page, "task");

    // The status filter: COMPLETE lists it, FAILED does not.
    await page.goto(`${up.url}/#/tasks`);
    await page.selectOption("[data-testid=status-filter]", "COMPLETE");
    await page.locator("[data-testid=task-row]", { hasText: taskId }).waitFor(WAIT);
    await page.selectOption("[data-testid=status-filter]", "FAILED");
    await page.locator("text=No tasks match.").waitFor(WAIT);
    assert.equal(await page.locator("[data-testid=task-row]", { hasText: taskId }).count(), 0);
  });

  await t.test("the containers page lists the task's container, running", async () => {
    const task = (await (await up.api(`/v2/task/${taskId}/`)).json()) as { container_id: string };
    assert.ok(task.container_id, JSON.stringify(task));
    await page.click("header nav a[href='#/containers']");
    const row = page.locator("[data-testid=container-row]", { hasText: task.container_id });
    // keep_warm_seconds=600: the container stays until the test's teardown stops it.
    await row.locator("text=running").waitFor(WAIT);
    assert.match((await row.textContent()) ?? "", /runner/);
    await shot(page, "containers");
  });

  await t.test("the logs page shows the workspace's lines and filters them", async () => {
    await page.goto(`${up.url}/#/logs?text=${encodeURIComponent(`${MARKER} done`)}`);
    await page.locator("[data-testid=log-line]", { hasText: `${MARKER} done 42` }).waitFor(WAIT);
    const lines = await page.locator("[data-testid=log-line]").allTextContents();
    assert.ok(lines.length > 0 && lines.every((l) => l.includes(`${MARKER} done`)), lines.join("\n"));
    await shot(page, "logs");
  });

  await t.test("the metrics page plots the pool's CPU capacity as an SVG line", async () => {
    await page.goto(`${up.url}/#/metrics`);
    // A line of at least two points ("M x y L x y"): pool rows are written every 15 s.
    const line = page.locator("[data-testid=chart] path[data-series=cpu_capacity][d*='L']");
    // "attached", not "visible": a flat line (capacity rarely changes) has a zero-height box.
    await line.waitFor({ ...WAIT, state: "attached" });
    const d = (await line.getAttribute("d")) ?? "";
    const points = d.match(/[ML][\d.]+ [\d.]+/g) ?? [];
    assert.ok(points.length >= 2, d);
    await shot(page, "metrics");
  });

  await t.test(
    "the events page lists the task's events and a webhook; the limits page its limits and usage",
    async () => {
      const hook = await up.api(`/api/v1/webhook/${wsId}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({
          url: "http://127.0.0.1:9/dashboard-hook",
          event_types: ["task.*"],
          description: "seen",
        }),
      });
      assert.equal(hook.status, 201, await hook.text());
      await page.click("header nav a[href='#/events']");
      await page.locator("[data-testid=event-row]", { hasText: taskId }).first().waitFor(WAIT);
      await page
        .locator("[data-testid=webhook-row]", { hasText: "127.0.0.1:9/dashboard-hook" })
        .waitFor(WAIT);
      await shot(page, "events");
      await page.click("header nav a[href='#/limits']");
      await page.locator("[data-testid=limit-row]", { hasText: "max_containers" }).waitFor(WAIT);
      assert.equal(await page.locator("[data-testid=limit-row]").count(), 16);
      const isolation = page.locator("[data-testid=limit-row]", { hasText: "isolation" });
      assert.match((await isolation.textContent()) ?? "", /each stub's own/);
      const userNs = page.locator("[data-testid=limit-row]", { hasText: "user_namespace" });
      assert.match((await userNs.textContent()) ?? "", /user_namespace\s*on/);
      const filter = page.locator("[data-testid=limit-row]", { hasText: "syscall_filter" });
      assert.match((await filter.textContent()) ?? "", /syscall_filter\s*allowlist/);
      await shot(page, "limits");
    },
  );

  await t.test("the usage page shows today's run time, by day and by member", async () => {
    await page.click("header nav a[href='#/usage']");
    const today = new Date().toISOString().slice(0, 10);
    const row = page.locator("[data-testid=usage-row]", { hasText: today });
    await row.waitFor(WAIT);
    // The task ran about 2 s: its run seconds are in the row's third cell.
    const runSeconds = Number(await row.locator("td").nth(2).textContent());
    assert.ok(runSeconds >= 2, `run seconds ${runSeconds}`);
    await page.selectOption("[data-testid=usage-page] select[name=by]", "member");
    await page.locator("[data-testid=usage-row]").first().waitFor(WAIT);
    await shot(page, "usage");
  });

  assert.deepEqual(pageErrors, [], "the pages threw no script errors");
});
