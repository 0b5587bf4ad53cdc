// Whether berth's ports are free or held by berth itself; a port held by
// another program is named with that program's pid and command line.

import { readFileSync, readdirSync, readlinkSync } from "node:fs";
import { type Finding, fail, ok } from "./finding.ts";

export interface BerthPort {
  port: number;
  /** Who listens there: coordinator, agent gRPC, NATS... */
  what: string;
  /** How to move berth off it. */
  flag: string;
}

/** Socket inodes listening on `port` (TCP, IPv4 and IPv6), from /proc/net. */
function listeningInodes(port: number, proc: string): Set<string> {
  const inodes = new Set<string>();
  for (const file of ["tcp", "tcp6"]) {
    let text = "";
    try {
      text = readFileSync(`${proc}/net/${file}`, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const f = line.trim().split(/\s+/);
      // local_address is ADDR:PORT in hex; st 0A is LISTEN.
      if (f.length < 10 || f[3] !== "0A") continue;
      if (Number.parseInt(f[1]!.split(":")[1] ?? "", 16) === port) inodes.add(f[9]!);
    }
  }
  return inodes;
}

/** The processes holding any of these socket inodes: pid and command line. */
function holders(inodes: Set<string>, proc: string): { pid: number; cmd: string }[] {
  const found: { pid: number; cmd: string }[] = [];
  if (inodes.size === 0) return found;
  for (const pid of readdirSync(proc).filter((d) => /^\d+$/.test(d))) {
    let fds: string[];
    try {
      fds = readdirSync(`${proc}/${pid}/fd`);
    } catch {
      continue; // gone, or not ours to read
    }
    const holds = fds.some((fd) => {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`${proc}/${pid}/fd/${fd}`));
        return m !== null && inodes.has(m[1]!);
      } catch {
        return false;
      }
    });
    if (!holds) continue;
    let cmd = "";
    try {
      cmd = readFileSync(`${proc}/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
    } catch {}
    found.push({ pid: Number(pid), cmd });
  }
  return found;
}

/** A berth process: the berth CLI (coordinator, agent, up) or the nats-server it runs. */
export function isBerthProcess(cmd: string): boolean {
  const words = cmd.split(" ");
  return words.some(
    (w) => /(^|\/)(berth|berth\.js|nats-server)$/.test(w) || /\/cli\/(bin|main)\.(js|ts)$/.test(w),
  );
}

export function checkPorts(ports: readonly BerthPort[], proc = "/proc"): Finding[] {
  return ports.map((p) => {
    const check = `port ${p.port}`;
    const inodes = listeningInodes(p.port, proc);
    if (inodes.size === 0) return ok(check, `free (for the ${p.what})`);
    const who = holders(inodes, proc);
    if (who.length === 0) {
      return fail(
        check,
        `something listens on it (the ${p.what}'s port) and its process is not visible`,
        "run berth doctor as root to see which process, then stop it or move berth elsewhere",
      );
    }
    if (who.every((h) => isBerthProcess(h.cmd)))
      return ok(
        check,
        `held by berth (pid ${who.map((h) => h.pid).join(", ")}: ${who[0]!.cmd.slice(0, 80)})`,
      );
    const other = who.find((h) => !isBerthProcess(h.cmd))!;
    return fail(
      check,
      `held by pid ${other.pid} (${other.cmd.slice(0, 80) || "?"}), not berth; the ${p.what} needs it`,
      `stop that program, or give berth another port (${p.flag})`,
    );
  });
}
