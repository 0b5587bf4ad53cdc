// `berth shell CONTAINER_ID` (docs/sandboxes.md, Shell): an interactive
// terminal in a running container of the workspace, over the coordinator's
// shell websocket. The local terminal is put in raw mode, so every key
// (Ctrl-C included) goes to the remote shell; window size changes follow.
// The websocket is the `ws` package's; an https coordinator is trusted as for
// every other CLI call (the system's CAs and NODE_EXTRA_CA_CERTS).

import type { IncomingMessage } from "node:http";
import type { Command } from "commander";
import { BerthError, CATALOG, type ErrorCode } from "../../shared/errors.ts";
import { ApiClient } from "../api-client.ts";
import { currentCredentials } from "../config.ts";

export interface ShellOptions {
  url: string;
  token: string;
  /** The workspace's external id. */
  workspace: string;
  containerId: string;
  cols?: number;
  rows?: number;
  onData(data: Buffer): void;
  /** The remote shell ended with this exit code. */
  onExit(code: number): void;
  /** The connection ended (after onExit, or without it when the coordinator went away). */
  onClose(reason: string): void;
}

export interface ShellConnection {
  write(data: Uint8Array | string): void;
  resize(cols: number, rows: number): void;
  close(): void;
}

/** Largest message taken; a terminal never sends one near it. */
const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

async function refusal(res: IncomingMessage): Promise<BerthError> {
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  try {
    const e = (JSON.parse(text) as { error?: { code?: string; message?: string } }).error;
    if (e?.message) {
      const code = (e.code && e.code in CATALOG ? e.code : "internal") as ErrorCode;
      return new BerthError(code, e.message);
    }
  } catch {
    // Not berth's error shape: say what came.
  }
  return new BerthError("internal", `the coordinator answered ${res.statusCode}: ${text.slice(0, 200)}`);
}

/** Opens the shell websocket; resolves once the remote shell runs. */
export async function openShell(o: ShellOptions): Promise<ShellConnection> {
  // Loaded here, not at the top: only `berth shell` needs a websocket client.
  const { default: WebSocket } = await import("ws");
  const u = new URL(
    `/api/v1/container/${encodeURIComponent(o.workspace)}/${encodeURIComponent(o.containerId)}/shell`,
    `${o.url}/`,
  );
  if (o.cols && o.rows) u.search = `cols=${o.cols}&rows=${o.rows}`;
  // `ws` takes http(s) URLs as ws(s). Never offer permessage-deflate: a terminal's messages are small.
  const ws = new WebSocket(u, {
    headers: { authorization: `Bearer ${o.token}` },
    perMessageDeflate: false,
    maxPayload: MAX_MESSAGE_BYTES,
  });
  return new Promise<ShellConnection>((resolve, reject) => {
    let upgraded = false;
    let opened = false;
    let reason = "the connection to the coordinator closed";
    // A refusal is an ordinary HTTP answer (berth's error shape), before any upgrade.
    ws.on("unexpected-response", (req, res) => {
      void refusal(res)
        .then(reject, reject)
        .finally(() => req.destroy());
    });
    ws.on("upgrade", () => {
      upgraded = true;
    });
    ws.on("error", (e) => {
      // Once open, "close" follows and says it.
      if (opened) return;
      reject(
        upgraded
          ? new BerthError("internal", `the coordinator's websocket handshake is not valid: ${e.message}`)
          : new BerthError("unavailable", `cannot reach ${o.url}: ${e.message}`),
      );
    });
    ws.on("message", (raw, binary) => {
      // binaryType is "nodebuffer": every message is one Buffer.
      const data = raw as Buffer;
      if (binary) return o.onData(data);
      let msg: { type?: string; code?: number; message?: string };
      try {
        msg = JSON.parse(data.toString("utf8")) as typeof msg;
      } catch {
        return;
      }
      if (msg.type === "exit" && typeof msg.code === "number") {
        reason = "";
        o.onExit(msg.code);
      } else if (msg.type === "error") reason = `the shell failed: ${msg.message}`;
    });
    ws.on("close", () => {
      if (opened) o.onClose(reason);
    });
    ws.on("open", () => {
      opened = true;
      resolve({
        write: (data) => ws.send(typeof data === "string" ? Buffer.from(data) : data, { binary: true }),
        resize: (cols, rows) => ws.send(JSON.stringify({ type: "resize", cols, rows }), { binary: false }),
        close: () => ws.close(1000),
      });
    });
  });
}

/** Runs the shell on this process's terminal; resolves with the remote exit code. */
export async function runShell(containerId: string, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const creds = currentCredentials(env);
  if (!creds.token) {
    throw new BerthError(
      "unauthenticated",
      "no token: run `berth configure default --token T`, or set SERVICE_TOKEN",
    );
  }
  const api = new ApiClient(creds.url, creds.token);
  const ws = await api.request<{ external_id: string }>("GET", "/api/v1/workspace/current");
  const { stdin, stdout } = process;
  let done!: (code: number) => void;
  let failed!: (e: Error) => void;
  const finished = new Promise<number>((resolve, reject) => {
    done = resolve;
    failed = reject;
  });
  let exitCode: number | undefined;
  const conn = await openShell({
    url: creds.url,
    token: creds.token,
    workspace: ws.external_id,
    containerId,
    ...(stdout.isTTY ? { cols: stdout.columns, rows: stdout.rows } : {}),
    onData: (d) => stdout.write(d),
    onExit: (code) => {
      exitCode = code;
    },
    onClose: (reason) => {
      if (exitCode !== undefined) done(exitCode);
      else failed(new BerthError("unavailable", reason));
    },
  });
  const onInput = (d: Buffer) => conn.write(d);
  const onResize = () => conn.resize(stdout.columns, stdout.rows);
  if (stdin.isTTY) stdin.setRawMode(true);
  stdin.on("data", onInput);
  stdin.resume();
  // A terminal's SIGWINCH arrives as the stream's resize event.
  if (stdout.isTTY) stdout.on("resize", onResize);
  try {
    return await finished;
  } finally {
    stdin.off("data", onInput);
    stdout.off("resize", onResize);
    if (stdin.isTTY) stdin.setRawMode(false);
    stdin.pause();
  }
}

export function shellCommand(program: Command): void {
  program
    .command("shell")
    .description("open an interactive terminal in a running container of the workspace")
    .argument("<container_id>", "the container's id (ctr-...), e.g. a sandbox or pod")
    .action(async (containerId: string) => {
      process.exitCode = await runShell(containerId);
    });
}
