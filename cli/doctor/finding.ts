// What `berth doctor` reports: one finding per check, each failure or
// warning with the command or setting that fixes it.

export type FindingStatus = "ok" | "warn" | "fail";

export interface Finding {
  /** The check: runc, cgroups, nftables, module overlay, port 8420, coordinator, clock, disk /var/lib/berth... */
  check: string;
  status: FindingStatus;
  /** What was found. */
  detail: string;
  /** What to do about it (warn and fail). */
  fix?: string;
}

export const ok = (check: string, detail: string): Finding => ({ check, status: "ok", detail });
export const warn = (check: string, detail: string, fix: string): Finding => ({
  check,
  status: "warn",
  detail,
  fix,
});
export const fail = (check: string, detail: string, fix: string): Finding => ({
  check,
  status: "fail",
  detail,
  fix,
});

const LABEL: Record<FindingStatus, string> = { ok: "ok  ", warn: "WARN", fail: "FAIL" };

/** The report as the terminal shows it: one line per finding, its fix indented below. */
export function formatFindings(findings: readonly Finding[]): string {
  const lines: string[] = [];
  for (const f of findings) {
    lines.push(`${LABEL[f.status]}  ${f.check}: ${f.detail}`);
    if (f.fix && f.status !== "ok") lines.push(`      fix: ${f.fix}`);
  }
  const failed = findings.filter((f) => f.status === "fail").length;
  const warned = findings.filter((f) => f.status === "warn").length;
  lines.push(
    failed === 0 && warned === 0
      ? `all ${findings.length} checks passed`
      : `${failed} failed, ${warned} warnings, ${findings.length - failed - warned} passed`,
  );
  return `${lines.join("\n")}\n`;
}
