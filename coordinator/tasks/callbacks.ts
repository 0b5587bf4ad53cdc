// Task callbacks (spec, Events: Task callbacks): when a task ends and it or
// its stub has a callback_url, POST {"data": <result>} signed with the
// workspace's signature token.

import { createHmac } from "node:crypto";
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { TaskError, TaskStatus } from "../../shared/tasks.ts";

export const CALLBACK_TIMEOUT_MS = 10_000;

export interface CallbackTask {
  id: string;
  status: TaskStatus;
  /** ISO 8601. */
  createdAt: string;
  resultJson: string | null;
  error: TaskError | null;
}

/** The hex HMAC-SHA256 of `<base64(body)>:<timestamp>` under the signature token. */
export function signCallback(token: string, body: string | Buffer, timestamp: string): string {
  const b64 = Buffer.from(body).toString("base64");
  return createHmac("sha256", token).update(`${b64}:${timestamp}`).digest("hex");
}

export function callbackBody(t: CallbackTask): string {
  let data: unknown = null;
  if (t.resultJson !== null) {
    try {
      data = JSON.parse(t.resultJson);
    } catch {
      data = null;
    }
  }
  return JSON.stringify(t.status === "COMPLETE" || !t.error ? { data } : { data, error: t.error });
}

export interface CallbackRequest {
  url: string;
  body: string;
  headers: Record<string, string>;
}

/** The exact request a finished task's callback sends. */
export function buildCallback(url: string, t: CallbackTask, signatureToken: string): CallbackRequest {
  const body = callbackBody(t);
  const timestamp = String(Math.floor(Date.parse(t.createdAt) / 1000));
  return {
    url,
    body,
    headers: {
      "content-type": "application/json",
      "x-task-timestamp": timestamp,
      "x-task-status": t.status,
      "x-task-id": t.id,
      "x-task-signature": signCallback(signatureToken, body, timestamp),
    },
  };
}

/** Sends callbacks; a failure is logged (with the URL, never the token) and not retried, as webhooks are. */
export class CallbackSender {
  private readonly inFlight = new Set<Promise<void>>();

  constructor(
    private readonly log: Logger,
    private readonly timeoutMs = CALLBACK_TIMEOUT_MS,
  ) {}

  send(req: CallbackRequest, taskId: string): void {
    const p = this.post(req, taskId).finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  /** Waits for callbacks under way (at shutdown). */
  async drain(): Promise<void> {
    await Promise.allSettled([...this.inFlight]);
  }

  private async post(req: CallbackRequest, taskId: string): Promise<void> {
    try {
      const res = await fetch(req.url, {
        method: "POST",
        headers: req.headers,
        body: req.body,
        signal: AbortSignal.timeout(this.timeoutMs),
      });
      await res.arrayBuffer().catch(() => undefined);
      if (!res.ok)
        this.log.warn({ taskId, url: req.url, status: res.status }, "task callback answered an error status");
    } catch (e) {
      this.log.warn({ taskId, url: req.url, err: describeError(e) }, "task callback failed");
    }
  }
}
