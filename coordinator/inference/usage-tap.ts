// Reads the model server's token counts out of its answer as it passes
// (docs/inference.md, Usage): the `usage` object of a JSON answer, or of a
// stream's usage chunk (`stream_options.include_usage`, which the gateway
// asks for itself when the client did not, and then strips again). Server
// counts only: nothing is estimated.

import { StringDecoder } from "node:string_decoder";

export interface TokenUsage {
  promptTokens: number | null;
  completionTokens: number | null;
  totalTokens: number | null;
}

/** The largest non-stream answer read for its usage (it is passed on whole either way). */
const MAX_JSON_READ = 4 * 1024 * 1024;
/** An SSE event longer than this is passed on unread. */
const MAX_EVENT = 1024 * 1024;

const intOrNull = (v: unknown): number | null =>
  typeof v === "number" && Number.isFinite(v) && v >= 0 ? Math.round(v) : null;

/** `usage` of an OpenAI-style object, or undefined when it has none. */
export function usageOf(obj: unknown): TokenUsage | undefined {
  const u = (obj as { usage?: unknown } | null)?.usage;
  if (!u || typeof u !== "object") return undefined;
  const r = u as Record<string, unknown>;
  const prompt = intOrNull(r.prompt_tokens ?? r.input_tokens);
  const completion = intOrNull(r.completion_tokens ?? r.output_tokens);
  const total = intOrNull(r.total_tokens) ?? (prompt !== null ? prompt + (completion ?? 0) : null);
  if (prompt === null && completion === null && total === null) return undefined;
  return { promptTokens: prompt, completionTokens: completion, totalTokens: total };
}

/**
 * Turns the server's body chunks into the chunks the client gets: passes
 * bytes through, reading usage on the way; for a stream whose usage chunk
 * the gateway asked for, drops that chunk.
 */
export interface BodyTap {
  /** Bytes to write now (possibly empty). */
  chunk(c: Buffer): Buffer;
  /** Bytes still held at the end. */
  end(): Buffer;
  usage(): TokenUsage | undefined;
}

export function tapFor(contentType: string, stripUsageChunk: boolean): BodyTap {
  if (contentType.includes("text/event-stream")) return new SseTap(stripUsageChunk);
  if (contentType.includes("json")) return new JsonTap();
  return { chunk: (c) => c, end: () => Buffer.alloc(0), usage: () => undefined };
}

class JsonTap implements BodyTap {
  private readonly kept: Buffer[] = [];
  private size = 0;

  chunk(c: Buffer): Buffer {
    this.size += c.length;
    if (this.size <= MAX_JSON_READ) this.kept.push(c);
    return c;
  }

  end(): Buffer {
    return Buffer.alloc(0);
  }

  usage(): TokenUsage | undefined {
    if (this.size > MAX_JSON_READ || this.size === 0) return undefined;
    try {
      return usageOf(JSON.parse(Buffer.concat(this.kept).toString("utf8")));
    } catch {
      return undefined;
    }
  }
}

const EVENT_END = /\r?\n\r?\n/g;

const USAGE_KEY = Buffer.from('"usage"');

/** Whether the chunk ends where an event ends (a blank line). */
function endsWithEventEnd(c: Buffer): boolean {
  const n = c.length;
  return (
    n >= 2 && c[n - 1] === 0x0a && (c[n - 2] === 0x0a || (n >= 3 && c[n - 2] === 0x0d && c[n - 3] === 0x0a))
  );
}

/** Whether `"usage"` appears with an object value (`"usage": null` on every chunk does not count). */
function hasUsageObject(c: Buffer): boolean {
  for (let i = c.indexOf(USAGE_KEY); i >= 0; i = c.indexOf(USAGE_KEY, i + USAGE_KEY.length)) {
    let j = i + USAGE_KEY.length;
    while (j < c.length && (c[j] === 0x20 || c[j] === 0x3a)) j++;
    if (j >= c.length || c[j] === 0x7b) return true;
  }
  return false;
}

/**
 * Server-sent events: complete events are written as they complete (an
 * event split over chunks waits for its end, nothing more is held), each
 * read for `usage`.
 */
class SseTap implements BodyTap {
  private pending = "";
  private found: TokenUsage | undefined;
  /** A character split over two chunks waits for its other half. */
  private readonly decoder = new StringDecoder("utf8");

  constructor(private readonly strip: boolean) {}

  chunk(c: Buffer): Buffer {
    // The common chunk: whole events, none with a usage object. It goes out as it came, undecoded.
    if (this.pending === "" && endsWithEventEnd(c) && !hasUsageObject(c)) return c;
    this.pending += this.decoder.write(c);
    let out = "";
    let from = 0;
    EVENT_END.lastIndex = 0;
    for (let m = EVENT_END.exec(this.pending); m; m = EVENT_END.exec(this.pending)) {
      const end = m.index + m[0].length;
      const event = this.pending.slice(from, end);
      if (!this.readEvent(event)) out += event;
      from = end;
    }
    this.pending = this.pending.slice(from);
    if (this.pending.length > MAX_EVENT) {
      out += this.pending;
      this.pending = "";
    }
    return Buffer.from(out, "utf8");
  }

  end(): Buffer {
    const rest = this.pending + this.decoder.end();
    this.pending = "";
    return Buffer.from(rest, "utf8");
  }

  usage(): TokenUsage | undefined {
    return this.found;
  }

  /** Reads one event; true when it is the usage-only chunk to drop. */
  private readEvent(event: string): boolean {
    if (!event.includes('"usage"')) return false;
    const data = event
      .split(/\r?\n/)
      .filter((l) => l.startsWith("data:"))
      .map((l) => l.slice(5).trimStart())
      .join("\n");
    let obj: unknown;
    try {
      obj = JSON.parse(data);
    } catch {
      return false;
    }
    const u = usageOf(obj);
    if (!u) return false;
    this.found = u;
    const choices = (obj as { choices?: unknown }).choices;
    return this.strip && Array.isArray(choices) && choices.length === 0;
  }
}
