// `berth doctor`'s network checks: the coordinator answers /healthz (and its
// Date header tells this host's clock skew), NATS answers with its INFO line.

import { connect } from "node:net";
import { describeError } from "../../shared/errors.ts";
import { type Finding, fail, ok, warn } from "./finding.ts";

const TIMEOUT_MS = 5000;

function duration(ms: number): string {
  const s = Math.round(Math.abs(ms) / 1000);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h}h ${m}m` : m > 0 ? `${m}m ${s % 60}s` : `${s}s`;
}

/**
 * GET <url>/healthz. A coordinator that answers is also asked the time: its
 * Date header against the midpoint of the request on this host's clock.
 */
export async function checkCoordinator(url: string, maxSkewMs: number): Promise<Finding[]> {
  const where = `${url.replace(/\/+$/, "")}/healthz`;
  const sent = Date.now();
  let res: Response;
  try {
    res = await fetch(where, { signal: AbortSignal.timeout(TIMEOUT_MS) });
  } catch (e) {
    const cause = (e as { cause?: unknown }).cause;
    return [
      fail(
        "coordinator",
        `cannot reach ${where}: ${describeError(cause ?? e)}`,
        "start the coordinator (systemctl start berth-coordinator), or point doctor at the right one " +
          "(--coordinator URL; BERTH_COORDINATOR in /etc/berth/agent.env; berth configure), and open its port (8420) in the firewall",
      ),
      warn("clock", "not compared: the coordinator is unreachable", "fix the coordinator check above"),
    ];
  }
  const received = Date.now();
  const body = await res.text().catch(() => "");
  const out: Finding[] = [];
  let version: string | undefined;
  try {
    const parsed = JSON.parse(body) as { ok?: boolean; version?: string };
    if (parsed.ok === true) version = parsed.version ?? "?";
  } catch {}
  out.push(
    res.ok && version !== undefined
      ? ok("coordinator", `${url} answers (berth ${version})`)
      : fail(
          "coordinator",
          `${where} answered HTTP ${res.status}, not a berth coordinator's health`,
          "check the URL: it must be the coordinator's own address (or a proxy that forwards /healthz)",
        ),
  );
  const date = res.headers.get("date");
  const at = date ? Date.parse(date) : Number.NaN;
  if (Number.isNaN(at)) {
    out.push(
      warn(
        "clock",
        `${url} sent no Date header: skew not measured`,
        "compare `date -u` on both hosts by hand",
      ),
    );
    return out;
  }
  // Date has whole seconds: its true instant lies in [at, at + 1 s).
  const skew = at + 500 - (sent + received) / 2;
  const slack = 500 + (received - sent) / 2;
  if (Math.abs(skew) > maxSkewMs + slack) {
    out.push(
      fail(
        "clock",
        `this host's clock is ${duration(skew)} ${skew > 0 ? "behind" : "ahead of"} the coordinator's (more than ${duration(maxSkewMs)})`,
        "synchronise both hosts with NTP: timedatectl set-ntp true (systemd-timesyncd) or chronyc makestep; " +
          "tokens, certificates and schedules depend on agreeing clocks",
      ),
    );
  } else out.push(ok("clock", `within ${duration(Math.max(Math.abs(skew), 1000))} of the coordinator's`));
  return out;
}

/** Each NATS server of `urls` (comma-separated) accepts a TCP connection and sends its INFO line. */
export async function checkNats(urls: string): Promise<Finding[]> {
  return Promise.all(urls.split(",").map((u) => checkOneNats(u.trim())));
}

async function checkOneNats(url: string): Promise<Finding> {
  const check = `nats ${url}`;
  let host: string;
  let port: number;
  try {
    const u = new URL(url.includes("://") ? url : `nats://${url}`);
    host = u.hostname.replace(/^\[|\]$/g, "");
    port = Number(u.port || 4222);
  } catch {
    return fail(check, "not a NATS URL", "give --nats nats://HOST:4222");
  }
  const fix =
    "start NATS (systemctl start berth-nats), check the URL (nats.url in /etc/berth/coordinator.json, or --nats) and open port 4222 in the firewall";
  return new Promise<Finding>((done) => {
    const sock = connect({ host, port, timeout: TIMEOUT_MS });
    let buf = "";
    const end = (f: Finding) => {
      sock.destroy();
      done(f);
    };
    sock.setEncoding("utf8");
    sock.on("data", (d: string) => {
      buf += d;
      if (!buf.includes("\n")) return;
      if (!buf.startsWith("INFO "))
        return end(fail(check, `answers, but not as NATS: ${JSON.stringify(buf.slice(0, 40))}`, fix));
      let info: { version?: string; jetstream?: boolean } = {};
      try {
        info = JSON.parse(buf.slice(5, buf.indexOf("\n")));
      } catch {}
      // nats-server announces "jetstream": true only when JetStream is on.
      if (info.jetstream !== true)
        return end(
          fail(
            check,
            `nats-server ${info.version ?? "?"} answers without JetStream (berth keeps its streams there)`,
            "enable JetStream in nats.conf (jetstream { store_dir: ... }; docs/install.md, NATS)",
          ),
        );
      end(ok(check, `nats-server ${info.version ?? "?"} answers, with JetStream`));
    });
    sock.on("timeout", () => end(fail(check, `no answer within ${TIMEOUT_MS / 1000}s`, fix)));
    sock.on("error", (e) => end(fail(check, `cannot connect: ${describeError(e)}`, fix)));
    sock.on("end", () => end(fail(check, "closed the connection without an INFO line", fix)));
  });
}
