// docs/getting-started.md, run as written against a real `berth up`
// cluster: every Python block is a file the page names in its first line,
// every shell block runs in bash in the app directory (the `berth` on PATH
// is this checkout's), and every text block lists lines the shell block
// before it prints, in order. `npm start` is the cluster itself: the test
// starts the `berth up` that package.json's start script runs. A block of
// any other kind fails the test, so nothing on the page goes unrun.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { CLI_BIN, UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const PAGE = fileURLToPath(new URL("../../docs/getting-started.md", import.meta.url));
const PACKAGE = fileURLToPath(new URL("../../package.json", import.meta.url));

interface Block {
  lang: string;
  body: string;
  line: number;
}

function blocks(markdown: string): Block[] {
  const found: Block[] = [];
  for (const m of markdown.matchAll(/^```(\w*)\n([\s\S]*?)^```$/gm)) {
    const line = markdown.slice(0, m.index).split("\n").length;
    found.push({ lang: m[1] ?? "", body: m[2] ?? "", line });
  }
  return found;
}

/** Each line of `expected` appears in `out`, in that order. */
function assertLinesInOrder(out: string, expected: string, where: string): void {
  let from = 0;
  for (const want of expected.split("\n").filter((l) => l.trim() !== "")) {
    const at = out.indexOf(want, from);
    assert.ok(at >= 0, `${where}: expected ${JSON.stringify(want)} after offset ${from} in:\n${out}`);
    from = at + want.length;
  }
}

test("the parser sees every fenced block of the page, and only known kinds", () => {
  const page = readFileSync(PAGE, "utf8");
  const found = blocks(page);
  assert.equal(found.length, (page.match(/^```/gm) ?? []).length / 2, "every fence is opened and closed");
  for (const b of found) assert.ok(["sh", "python", "text"].includes(b.lang), `line ${b.line}: ${b.lang}`);
  assert.match(JSON.parse(readFileSync(PACKAGE, "utf8")).scripts.start, /cli\/main\.ts up$/);
});

test("every block of getting started runs as written on a berth up cluster", async (t) => {
  if (!needs(t, { root: true, commands: [...UP_COMMANDS, "bash", "curl"] })) return;
  const td = new Teardown(t);
  const page = readFileSync(PAGE, "utf8");
  const bin = mkdtempSync(join(tmpdir(), "berth-docs-bin-"));
  td.defer(() => rmSync(bin, { recursive: true, force: true }));
  writeFileSync(join(bin, "berth"), `#!/bin/sh\nexec "${process.execPath}" "${CLI_BIN}" "$@"\n`);
  chmodSync(join(bin, "berth"), 0o755);

  let up: Awaited<ReturnType<typeof startBerthUp>> | undefined;
  let last: { out: string; line: number } | undefined;
  for (const b of blocks(page)) {
    const where = `docs/getting-started.md line ${b.line}`;
    if (b.lang === "sh" && b.body.trim() === "npm start") {
      up = await startBerthUp(td);
      continue;
    }
    assert.ok(up, `${where}: a block before \`npm start\``);
    const cluster = up;
    if (b.lang === "python") {
      const name = /^# (\w+\.py)\n/.exec(b.body)?.[1];
      assert.ok(name, `${where}: a Python block starts with "# FILE.py"`);
      writeFileSync(join(cluster.appDir, name), b.body);
      continue;
    }
    if (b.lang === "text") {
      assert.ok(last, `${where}: a text block follows a shell block`);
      assertLinesInOrder(last.out, b.body, `${where} (the output of the block at line ${last.line})`);
      continue;
    }
    assert.equal(b.lang, "sh", `${where}: a block the test does not know how to run`);
    const r = await new Promise<{ code: number; out: string }>((resolve) => {
      execFile(
        "bash",
        ["-e", "-o", "pipefail", "-c", b.body],
        {
          cwd: cluster.appDir,
          env: { ...cluster.env, PATH: `${bin}:${process.env.PATH}`, BASH_ENV: "" },
          timeout: 300_000,
          maxBuffer: 16 << 20,
        },
        (err, stdout, stderr) => {
          const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
          resolve({ code, out: `${stdout}${stderr}` });
        },
      );
    });
    assert.equal(r.code, 0, `${where} exited ${r.code}:\n${r.out}\nberth up:\n${cluster.output()}`);
    t.diagnostic(`${where}:\n${r.out}`);
    last = { out: r.out, line: b.line };
  }
  assert.ok(up, "the page starts a cluster");
});
