// `berth shell` end to end on a real container: the coordinator's shell
// websocket route over a real agent (gRPC on a unix socket, runc, a tty exec)
// and a real SQLite token store; driven by the CLI's client, then by the CLI
// itself inside a pseudo-terminal (node-pty).

import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { test, type TestContext } from "node:test";
import * as pty from "node-pty";
import pino from "pino";
import { bearerToken } from "../../coordinator/http/auth.ts";
import { attachShellUpgrades, type ShellTarget } from "../../coordinator/edge/shell.ts";
import { Store } from "../../coordinator/records.ts";
import { openShell, type ShellOptions } from "../../cli/commands/shell.ts";
import { waitFor } from "../../shared/net.ts";
import { needs, tempDir } from "../helpers/env.ts";
import { realAgent } from "../helpers/real-agent.ts";
import { HOST_COMMANDS, MiB } from "../host/harness.ts";

const CLI_MAIN = fileURLToPath(new URL("../../cli/main.ts", import.meta.url));
const CONTAINER = "ctr-shell1";

interface World {
  url: string;
  token: string;
  otherToken: string;
  wsExternal: string;
  otherExternal: string;
}

async function world(t: TestContext): Promise<World> {
  const { h, client } = await realAgent(t);
  await h.host.runContainer({
    id: CONTAINER,
    image: h.imageRef,
    args: ["sleep", "infinity"],
    cpu: 0.25,
    memoryBytes: 128 * MiB,
  });

  const store = await Store.open(`sqlite:${tempDir(t)}/b.db`);
  t.after(() => store.close());
  const ws = await store.workspaces.create("main");
  const other = await store.workspaces.create("other");
  const targets = new Map<string, ShellTarget>([[CONTAINER, { agentId: "agent-1", workspaceId: ws.id }]]);
  // The one REST call the CLI makes before the shell: which workspace its token is of.
  const http = createServer((req, res) => {
    void (async () => {
      const p = await store.tokens
        .authenticate(bearerToken(req.headers.authorization))
        .catch(() => undefined);
      if (req.url !== "/api/v1/workspace/current" || !p) return res.writeHead(404).end();
      res.writeHead(200, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ id: p.workspace.id, external_id: p.workspace.externalId, name: p.workspace.name }),
      );
    })();
  });
  attachShellUpgrades(http, {
    tokens: store.tokens,
    targets: [{ find: async (id) => targets.get(id) }],
    agents: { client: () => client },
    log: pino({ level: "silent" }),
  });
  await new Promise<void>((r) => http.listen(0, "127.0.0.1", r));
  t.after(() => {
    http.closeAllConnections();
    http.close();
  });
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
    token: (await store.tokens.create(ws.id)).secret,
    otherToken: (await store.tokens.create(other.id)).secret,
    wsExternal: ws.externalId,
    otherExternal: other.externalId,
  };
}

/** A shell through the client, its output gathered. */
async function shell(w: World, over: Partial<ShellOptions> = {}) {
  let out = "";
  let exit: number | undefined;
  let closed: string | undefined;
  const conn = await openShell({
    url: w.url,
    token: w.token,
    workspace: w.wsExternal,
    containerId: CONTAINER,
    cols: 80,
    rows: 24,
    onData: (d) => {
      out += d.toString("utf8");
    },
    onExit: (c) => {
      exit = c;
    },
    onClose: (r) => {
      closed = r;
    },
    ...over,
  });
  const until = (text: string) =>
    waitFor(() => out.includes(text), {
      timeoutMs: 30_000,
      intervalMs: 20,
      what: `${JSON.stringify(text)} in ${JSON.stringify(out.slice(-300))}`,
    });
  return { conn, until, out: () => out, exit: () => exit, closed: () => closed };
}

const refusedWith = (code: string) => (e: unknown) => {
  assert.equal((e as { code?: string }).code, code, (e as Error).message);
  return true;
};

test("berth shell: a tty exec over the websocket route, then the CLI in a pseudo-terminal", {
  timeout: 300_000,
}, async (t) => {
  if (!needs(t, { root: true, commands: HOST_COMMANDS })) return;
  const w = await world(t);

  await t.test("refusals come before any upgrade", async () => {
    const none = () => {};
    const base = {
      url: w.url,
      containerId: CONTAINER,
      cols: 80,
      rows: 24,
      onData: none,
      onExit: none,
      onClose: none,
    };
    await assert.rejects(
      openShell({ ...base, token: w.otherToken, workspace: w.otherExternal }),
      refusedWith("not_found"),
    );
    await assert.rejects(
      openShell({ ...base, token: w.token, workspace: w.otherExternal }),
      refusedWith("not_found"),
    );
    await assert.rejects(
      openShell({ ...base, token: w.token, workspace: w.wsExternal, containerId: "ctr-nope" }),
      refusedWith("not_found"),
    );
    await assert.rejects(
      openShell({ ...base, token: "bt_wrong", workspace: w.wsExternal }),
      refusedWith("unauthenticated"),
    );
  });

  await t.test("input, output, resize, Ctrl-C and the exit code", async () => {
    const s = await shell(w);
    s.conn.write("echo hi-$((1+2))\n");
    await s.until("hi-3");
    // runc passes a new size on to the container's terminal when it gets SIGWINCH,
    // so a command typed right after a resize (or the first one) may still see the
    // old size: ask until the size shows.
    const sizeShows = (size: string) =>
      waitFor(
        () => {
          s.conn.write("stty size\n");
          return s.out().includes(size);
        },
        { timeoutMs: 30_000, intervalMs: 500, what: `the remote terminal to be ${size}` },
      );
    await sizeShows("24 80");
    s.conn.resize(100, 37);
    await sizeShows("37 100");
    s.conn.write("echo started-$((3+3)); sleep 100; echo not-$((9+9))\n");
    await s.until("started-6");
    s.conn.write("\x03");
    // Without the interrupt this would come 100 s later: past the wait.
    s.conn.write("echo back-$((4+4))\n");
    await s.until("back-8");
    assert.ok(!s.out().includes("not-18"), "the interrupted line did not go on");
    s.conn.write("exit 3\n");
    await waitFor(() => s.closed() !== undefined, { timeoutMs: 30_000, what: "the shell to close" });
    assert.equal(s.exit(), 3);
    assert.equal(s.closed(), "");
  });

  await t.test(
    "the CLI in a pseudo-terminal: raw keys, SIGWINCH, Ctrl-C, exits with the remote code",
    async () => {
      const term = pty.spawn(process.execPath, ["--import", "tsx", CLI_MAIN, "shell", CONTAINER], {
        cols: 90,
        rows: 30,
        cwd: process.cwd(),
        env: {
          // The test runner's marker would make the child report to it instead of running.
          ...Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== "NODE_TEST_CONTEXT")),
          BERTH_URL: w.url,
          SERVICE_TOKEN: w.token,
          BERTH_CONFIG: join(tempDir(t), "none.json"),
          TERM: "xterm-256color",
        } as Record<string, string>,
      });
      let out = "";
      let exitCode: number | undefined;
      term.onData((d) => {
        out += d;
      });
      term.onExit((e) => {
        exitCode = e.exitCode;
      });
      t.after(() => {
        if (exitCode === undefined) term.kill();
      });
      const until = (text: string) =>
        waitFor(() => out.includes(text), {
          timeoutMs: 60_000,
          intervalMs: 20,
          what: `${JSON.stringify(text)} in ${JSON.stringify(out.slice(-300))}`,
        });
      // The remote shell's prompt: the CLI is connected and its terminal raw. Keys typed
      // before that meet the local line discipline (echoed, buffered) and race the switch.
      await until("# ");
      term.write("echo cli-$((6+1))\r");
      await until("cli-7");
      // Sizes reach the remote terminal asynchronously: ask until each shows.
      const sizeShows = (size: string) =>
        waitFor(
          () => {
            term.write("stty size\r");
            return out.includes(size);
          },
          { timeoutMs: 30_000, intervalMs: 500, what: `the remote terminal to be ${size}` },
        );
      await sizeShows("30 90");
      term.resize(120, 40);
      await sizeShows("40 120");
      term.write("echo go-$((1+4)); sleep 100; echo no-$((8+8))\r");
      await until("go-5");
      term.write("\x03");
      term.write("echo ok-$((1+1))\r");
      await until("ok-2");
      assert.ok(!out.includes("no-16"));
      term.write("exit 3\r");
      await waitFor(() => exitCode !== undefined, { timeoutMs: 30_000, what: "the CLI to exit" });
      assert.equal(exitCode, 3);
    },
  );
});
