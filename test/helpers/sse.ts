// A reader of server-sent events for the streaming routes' tests.

export interface SseEvent {
  id?: string;
  event?: string;
  data?: string;
}

/** Reads server-sent events (and comments) from a streaming response until `enough` says so. */
export async function readSse(res: Response, enough: (evs: SseEvent[], comments: string[]) => boolean) {
  const reader = (res.body as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  const evs: SseEvent[] = [];
  const comments: string[] = [];
  let buf = "";
  while (!enough(evs, comments)) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let at = buf.indexOf("\n\n");
    while (at >= 0) {
      const block = buf.slice(0, at);
      buf = buf.slice(at + 2);
      const ev: SseEvent = {};
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) comments.push(line.slice(1).trim());
        else {
          const i = line.indexOf(": ");
          (ev as Record<string, string>)[line.slice(0, i)] = line.slice(i + 2);
        }
      }
      if (ev.id) evs.push(ev);
      at = buf.indexOf("\n\n");
    }
  }
  await reader.cancel();
  return { evs, comments };
}
