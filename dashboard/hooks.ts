// Loading what a page shows, and keeping it fresh: the API is polled (no
// EventSource: it cannot send the Authorization header).

import { useEffect, useState } from "preact/hooks";
import { html } from "htm/preact";

export interface Loaded<T> {
  data: T | null;
  error: string | null;
}

/** Calls load now and every `everyMs` (0: once) while the page shows; re-runs when `key` changes. */
export function usePoll<T>(load: () => Promise<T>, key: string, everyMs = 5000): Loaded<T> & { reload(): void } {
  const [state, setState] = useState<Loaded<T>>({ data: null, error: null });
  const [tick, setTick] = useState(0);
  // Re-run when `key` (what load depends on) changes, or on reload().
  useEffect(() => {
    let live = true;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const run = async () => {
      try {
        const data = await load();
        if (live) setState({ data, error: null });
      } catch (e) {
        if (live) setState((s) => ({ data: s.data, error: (e as Error).message }));
      }
      if (live && everyMs > 0) timer = setTimeout(run, everyMs);
    };
    void run();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [key, tick]);
  return { ...state, reload: () => setTick((n) => n + 1) };
}

export function ErrorNote({ error }: { error: string | null }) {
  return error ? html`<p class="error" role="alert">${error}</p>` : null;
}
