// The docs are for operators and users of a clone of this repository: every
// link stays inside it (a relative path to a file that exists here; no
// http(s) link, no path that climbs out of the repository), and no doc talks
// of how it was written (issue numbers, "the spec", "the brief", the
// "development VM", a "so far" heading). The last test plants each breach in
// a document to show the checker finds it.

import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const SKIP_DIRS = new Set(["node_modules", "dist", "test-results", ".git", "__pycache__"]);

/** Every doc: README*.md anywhere in the repository, and every Markdown file under docs/. */
function docFiles(dir = ROOT): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    if (SKIP_DIRS.has(name)) continue;
    const path = join(dir, name);
    const st = statSync(path);
    if (st.isDirectory()) out.push(...docFiles(path));
    else if (
      /^README.*\.md$/i.test(name) ||
      (path.startsWith(join(ROOT, "docs") + sep) && name.endsWith(".md"))
    )
      out.push(path);
  }
  return out.sort();
}

/** Words about how the repository was made, not about berth. */
const PROCESS_WORDS: [RegExp, string][] = [
  [/\bissues? #?\d+/i, "an issue number"],
  [/\brequirements? \d+/i, "a requirement number"],
  [/\bthe spec\b(?!')/i, '"the spec" (say which: the beta9 contract, the OCI or CDI spec)'],
  [/\bthe spec's\b/i, '"the spec\'s"'],
  [/\(spec[,)]/i, '"(spec, ...)"'],
  [/\bthe brief\b/i, '"the brief"'],
  [/\bdevelopment VM\b/i, '"the development VM"'],
  [/service-spec\.md|\bDESIGN\.md\b/, "a document outside the repository"],
  [/(?:^|[\s`(])\.\.\/shared\//, "a path outside the repository (../shared/)"],
];

/** Markdown link targets: [text](target), [ref]: target, <scheme://...>. Code spans and blocks are not links. */
function linkTargets(text: string): { target: string; line: number }[] {
  const out: { target: string; line: number }[] = [];
  let inFence = false;
  text.split("\n").forEach((raw, i) => {
    if (/^\s*(```|~~~)/.test(raw)) {
      inFence = !inFence;
      return;
    }
    if (inFence) return;
    const line = raw.replace(/`[^`]*`/g, "");
    for (const m of line.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g))
      out.push({ target: m[1]!, line: i + 1 });
    for (const m of line.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/g))
      out.push({ target: m[1]!, line: i + 1 });
    for (const m of line.matchAll(/<((?:https?|ftp):\/\/[^>\s]+)>/g))
      out.push({ target: m[1]!, line: i + 1 });
  });
  return out;
}

/** The problems of one document at `path` (inside `root`), one line each. */
export function docProblems(path: string, text: string, root = ROOT): string[] {
  const rel = relative(root, path);
  const problems: string[] = [];
  for (const { target, line } of linkTargets(text)) {
    const where = `${rel}:${line}: link ${target}`;
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) {
      problems.push(`${where} leaves the repository (a ${target.split(":")[0]} link)`);
      continue;
    }
    if (target.startsWith("#")) continue;
    const file = decodeURI(target.split("#")[0]!);
    const abs = file.startsWith("/") ? join(root, file) : resolve(dirname(path), file);
    if (abs !== root && !abs.startsWith(root + sep)) problems.push(`${where} leaves the repository`);
    else if (!existsSync(abs)) problems.push(`${where} names no file of the repository`);
  }
  text.split("\n").forEach((line, i) => {
    for (const [re, what] of PROCESS_WORDS) {
      if (re.test(line)) problems.push(`${rel}:${i + 1}: ${what}: ${line.trim().slice(0, 120)}`);
    }
    if (/^#{1,6}\s.*\bso far\b/i.test(line))
      problems.push(`${rel}:${i + 1}: a "so far" heading: ${line.trim()}`);
  });
  return problems;
}

test("the docs link only inside the repository and do not talk of how they were made", () => {
  const files = docFiles();
  for (const must of [
    "README.md",
    "docs/install.md",
    "docs/design-notes.md",
    "docs/queues.md",
    "sdk/python/README.md",
  ])
    assert.ok(files.includes(join(ROOT, must)), `${must} is checked`);
  const problems = files.flatMap((f) => docProblems(f, readFileSync(f, "utf8")));
  assert.deepEqual(problems, []);
});

test("planted breaches are each found", () => {
  const path = join(ROOT, "docs", "planted.md");
  const planted = [
    "# Planted",
    "See [the contract](../../shared/spec/service-spec.md) and [Beam](https://beam.cloud/docs).",
    "A ref link:",
    "[site]: http://example.com/page",
    "An autolink <https://example.org>, a [missing file](nope.md) and [an escape](/../../etc/passwd).",
    "Built for issue 12 (issue 5), requirement 7.",
    "As the spec says, and the spec's table; a default (spec, Limits).",
    "The brief asks for it; measured on the development VM.",
    "Architecture: `../shared/DESIGN.md`.",
    "## CLI so far",
  ].join("\n");
  const found = docProblems(path, planted).join("\n");
  for (const expected of [
    /link \.\.\/\.\.\/shared\/spec\/service-spec\.md leaves the repository/,
    /link https:\/\/beam\.cloud\/docs leaves the repository \(a https link\)/,
    /link http:\/\/example\.com\/page leaves the repository/,
    /link https:\/\/example\.org leaves the repository/,
    /link nope\.md names no file/,
    /link \/\.\.\/\.\.\/etc\/passwd leaves the repository/,
    /:6: an issue number/,
    /:6: a requirement number/,
    /:7: "the spec"/,
    /:7: "the spec's"/,
    /:7: "\(spec, \.\.\.\)"/,
    /:8: "the brief"/,
    /:8: "the development VM"/,
    /:9: a document outside the repository/,
    /:9: a path outside the repository/,
    /:10: a "so far" heading/,
  ])
    assert.match(found, expected);

  // What is fine: links inside the repository, anchors, code spans and blocks, other specs, "so far" in prose.
  const fine = [
    "See [install](install.md#agents), [the README](../README.md), [top](#planted).",
    "The OCI spec and the CDI spec; `https://in.a.code.span` is not a link.",
    "```",
    "curl https://berth.example.com/healthz",
    "```",
    "Everything done so far is undone.",
  ].join("\n");
  assert.deepEqual(docProblems(path, fine), []);
});
