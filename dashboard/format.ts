// Small formatting helpers for tables.

export function bytes(n: number | null | undefined): string {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(i === 0 ? 0 : 1)} ${units[i]}`;
}

/** "12:03:04" today, else the date too; "–" for none. */
export function when(iso: string | null | undefined): string {
  if (!iso) return "–";
  const d = new Date(iso);
  const sameDay = d.toDateString() === new Date().toDateString();
  return sameDay ? d.toLocaleTimeString() : d.toLocaleString();
}

/** Seconds between two times (to now while running), "–" before the start. */
export function duration(start: string | null, end: string | null): string {
  if (!start) return "–";
  const ms = (end ? Date.parse(end) : Date.now()) - Date.parse(start);
  if (ms < 1000) return `${ms} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.round(ms / 60_000)} min`;
}

/** The hash route's path and query: "#/tasks?status=RUNNING" → ["/tasks", {status: "RUNNING"}]. */
export function parseHash(hash: string): { path: string; query: URLSearchParams } {
  const h = hash.replace(/^#/, "") || "/fleet";
  const i = h.indexOf("?");
  return i < 0
    ? { path: h, query: new URLSearchParams() }
    : { path: h.slice(0, i), query: new URLSearchParams(h.slice(i + 1)) };
}
