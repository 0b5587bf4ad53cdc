// A line chart drawn as SVG from the metrics API's series: one path per
// series (a gap where a bucket has no value), axes with the value range and
// the time range. No chart library: the series are small (≤ 1440 points).

import { html } from "htm/preact";
import type { Series } from "./api.ts";

const W = 640;
const H = 200;
const PAD = { left: 56, right: 12, top: 10, bottom: 24 };
const COLOURS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2"];

/** The SVG path of one series over the chart's scales: "M x y L x y ..." runs, broken at nulls. */
export function linePath(points: [string, number | null][], x: (t: number) => number, y: (v: number) => number) {
  let d = "";
  let run = 0;
  // A run of one point is a zero-length segment ("l0 0"): with round caps it shows as a dot.
  const endRun = () => {
    if (run === 1) d += "l0 0 ";
    run = 0;
  };
  for (const [t, v] of points) {
    if (v === null) {
      endRun();
      continue;
    }
    d += `${run > 0 ? "L" : "M"}${x(Date.parse(t)).toFixed(1)} ${y(v).toFixed(1)} `;
    run++;
  }
  endRun();
  return d.trim();
}

const label = (s: Series) =>
  s.labels && Object.keys(s.labels).length > 0
    ? `${s.name} {${Object.entries(s.labels)
        .map(([k, v]) => `${k}=${v}`)
        .join(", ")}}`
    : s.name;

export function LineChart({ title, series }: { title: string; series: Series[] }) {
  const times = series.flatMap((s) => s.points.map(([t]) => Date.parse(t)));
  const values = series.flatMap((s) => s.points.map(([, v]) => v).filter((v): v is number => v !== null));
  if (times.length === 0) return html`<p class="muted">${title}: no series.</p>`;
  const t0 = Math.min(...times);
  const t1 = Math.max(...times, t0 + 1);
  const vMax = Math.max(...values, 0) || 1;
  const vMin = Math.min(...values, 0);
  const x = (t: number) => PAD.left + ((t - t0) / (t1 - t0)) * (W - PAD.left - PAD.right);
  const y = (v: number) => H - PAD.bottom - ((v - vMin) / (vMax - vMin || 1)) * (H - PAD.top - PAD.bottom);
  const unit = series[0]?.unit ?? "";
  return html`
    <figure class="chart" data-testid="chart">
      <figcaption>${title}</figcaption>
      <svg viewBox="0 0 ${W} ${H}" width=${W} height=${H} role="img" aria-label=${title}>
        <line x1=${PAD.left} y1=${H - PAD.bottom} x2=${W - PAD.right} y2=${H - PAD.bottom} class="axis" />
        <line x1=${PAD.left} y1=${PAD.top} x2=${PAD.left} y2=${H - PAD.bottom} class="axis" />
        <text x=${PAD.left - 4} y=${PAD.top + 8} text-anchor="end" class="tick">${vMax.toPrecision(3)}</text>
        <text x=${PAD.left - 4} y=${H - PAD.bottom} text-anchor="end" class="tick">${vMin.toPrecision(3)}</text>
        <text x=${PAD.left} y=${H - 6} class="tick">${new Date(t0).toLocaleTimeString()}</text>
        <text x=${W - PAD.right} y=${H - 6} text-anchor="end" class="tick">${new Date(t1).toLocaleTimeString()}</text>
        ${series.map(
          (s, i) =>
            html`<path d=${linePath(s.points, x, y)} fill="none" stroke=${COLOURS[i % COLOURS.length]}
              stroke-width="2" stroke-linecap="round" data-series=${s.name} />`,
        )}
      </svg>
      <ul class="legend">
        ${series.map(
          (s, i) => html`<li><span style=${`background:${COLOURS[i % COLOURS.length]}`}></span>${label(s)} (${unit})</li>`,
        )}
      </ul>
    </figure>`;
}
