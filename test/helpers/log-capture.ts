// A pino logger whose lines a test reads back as objects: what the server
// logged next to the answer the client got.

import pino from "pino";

export interface CapturedLog {
  log: pino.Logger;
  lines: () => Record<string, unknown>[];
}

export function captureLog(): CapturedLog {
  const raw: string[] = [];
  const log = pino({ level: "info" }, { write: (s: string) => void raw.push(s) });
  return { log, lines: () => raw.map((l) => JSON.parse(l) as Record<string, unknown>) };
}
