// The forwarding sysctls' values before berth are recorded once, at the first
// start, so a later start (which sees berth's own values) keeps them.

import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { readSysctlRecord, recordSysctlsOnce } from "../../agent/network/sysctl-record.ts";
import { tempDir } from "../helpers/env.ts";

test("the first start records the sysctls; later ones keep that record; absent keys are left out", (t) => {
  const dir = tempDir(t, "berth-sysctl-");
  const procSys = join(dir, "proc-sys");
  mkdirSync(join(procSys, "net", "ipv4"), { recursive: true });
  writeFileSync(join(procSys, "net/ipv4/ip_forward"), "0\n");
  const data = join(dir, "network");
  mkdirSync(data);
  assert.equal(readSysctlRecord(data), undefined);
  const keys = ["net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"];
  recordSysctlsOnce(data, keys, procSys);
  writeFileSync(join(procSys, "net/ipv4/ip_forward"), "1\n"); // what berth then set
  recordSysctlsOnce(data, keys, procSys);
  assert.deepEqual(readSysctlRecord(data), { "net/ipv4/ip_forward": "0" });
});
