// The import rules of docs/architecture.md, checked on every source file:
// processes meet only through the contract (api/), packages expose entry
// points, and the coordinator's areas form no cycle. A rule broken here is
// a design change: change docs/architecture.md with it, not this test alone.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { dirname, relative, resolve } from "node:path";
import { describe, test } from "node:test";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
// `from "./x"` (imports and re-exports), bare `import "./x"` and `import("./x")`.
const SPECIFIER = /\bfrom\s*["'](\.{1,2}\/[^"']+)["']|\bimport\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g;

interface Edge {
  from: string;
  to: string;
}

/** Every relative import of a source file (tests excluded), as repository paths. */
export function sourceEdges(root = ROOT): Edge[] {
  const files = execFileSync("git", ["ls-files", "--cached", "--others", "--exclude-standard", "*.ts"], {
    cwd: root,
    encoding: "utf8",
  })
    .split("\n")
    .filter((f) => f && !f.startsWith("test/") && !f.endsWith(".test.ts") && !f.startsWith("bench/"));
  const edges: Edge[] = [];
  for (const from of files) {
    let src: string;
    try {
      src = readFileSync(resolve(root, from), "utf8");
    } catch {
      continue; // listed but deleted in the work tree
    }
    for (const m of src.matchAll(SPECIFIER)) {
      const spec = m[1] ?? m[2];
      if (spec === undefined) continue;
      edges.push({ from, to: relative(root, resolve(root, dirname(from), spec)) });
    }
  }
  return edges;
}

const top = (p: string): string => p.split("/")[0] ?? "";
/** coordinator/<area>/… → area; files directly in coordinator/ are its root (main, options). */
const coordinatorArea = (p: string): string => {
  const parts = p.split("/");
  return parts.length > 2 ? (parts[1] ?? "") : "(root)";
};

type Rule = (e: Edge) => string | undefined;

const RULES: Rule[] = [
  (e) =>
    ["coordinator", "cli"].includes(top(e.from)) && top(e.to) === "agent" &&
    !(e.from === "cli/commands/agent.ts" && e.to === "agent/main.ts")
      ? "coordinator/ and cli/ reach an agent through api/ only (cli/commands/agent.ts may start the agent process via agent/main.ts)"
      : undefined,
  (e) =>
    top(e.from) !== "api" && top(e.to) === "api" && e.to !== "api/index.ts" && e.to !== "api/grpc/index.ts"
      ? "outside api/, import api/index.ts or api/grpc/index.ts, not a file behind them"
      : undefined,
  (e) =>
    top(e.from) === "api" && !["api", "shared"].includes(top(e.to))
      ? "api/ builds on shared/ only: the contract knows no process's internals"
      : undefined,
  (e) =>
    e.from.startsWith("api/") && !e.from.startsWith("api/grpc/") && e.to.startsWith("api/grpc/")
      ? "the contract's interfaces do not depend on their gRPC transport"
      : undefined,
  (e) => (top(e.from) === "shared" && top(e.to) !== "shared" ? "shared/ imports nothing outside shared/" : undefined),
  (e) =>
    top(e.from) === "agent" && ["coordinator", "cli"].includes(top(e.to))
      ? "the agent never imports the coordinator or the CLI"
      : undefined,
  (e) => (top(e.from) === "coordinator" && top(e.to) === "cli" ? "the coordinator never imports the CLI" : undefined),
];

/** Breaches of RULES, one line each. */
export function ruleBreaches(edges: Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    for (const rule of RULES) {
      const why = rule(e);
      if (why) out.push(`${e.from} -> ${e.to}: ${why}`);
    }
  }
  return out;
}

/** Cycles among coordinator areas (strongly connected components of more than one area). */
export function areaCycles(edges: Edge[]): string[][] {
  const graph = new Map<string, Set<string>>();
  for (const e of edges) {
    if (top(e.from) !== "coordinator" || top(e.to) !== "coordinator") continue;
    const a = coordinatorArea(e.from);
    const b = coordinatorArea(e.to);
    if (a === b || a === "(root)") continue; // main.ts wires every area: it is the root, not an area
    if (!graph.has(a)) graph.set(a, new Set());
    graph.get(a)?.add(b);
  }
  // Tarjan's strongly connected components.
  let index = 0;
  const idx = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const sccs: string[][] = [];
  const visit = (v: string): void => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v) ?? 0, low.get(w) ?? 0));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v) ?? 0, idx.get(w) ?? 0));
    }
    if (low.get(v) === idx.get(v)) {
      const scc: string[] = [];
      let w: string | undefined;
      do {
        w = stack.pop();
        if (w === undefined) break;
        onStack.delete(w);
        scc.push(w);
      } while (w !== v);
      if (scc.length > 1) sccs.push(scc.sort());
    }
  };
  for (const v of graph.keys()) if (!idx.has(v)) visit(v);
  return sccs;
}

describe("import rules (docs/architecture.md)", () => {
  const edges = sourceEdges();

  test("the source tree has imports to check", () => {
    assert.ok(edges.length > 500, `only ${edges.length} imports found: is the scan broken?`);
    assert.ok(edges.some((e) => e.from.startsWith("coordinator/") && e.to === "api/index.ts"));
  });

  test("processes meet through the contract; packages through their entry points", () => {
    assert.deepEqual(ruleBreaches(edges), []);
  });

  test("no cycle among the coordinator's areas", () => {
    assert.deepEqual(areaCycles(edges), []);
  });

  test("the checks fail on a breach", () => {
    assert.equal(ruleBreaches([{ from: "coordinator/x/y.ts", to: "agent/rpc/server.ts" }]).length, 1);
    assert.equal(ruleBreaches([{ from: "cli/a.ts", to: "api/containers.ts" }]).length, 1);
    assert.equal(ruleBreaches([{ from: "api/containers.ts", to: "agent/host/host.ts" }]).length, 1);
    assert.equal(ruleBreaches([{ from: "cli/commands/agent.ts", to: "agent/main.ts" }]).length, 0);
    assert.deepEqual(
      areaCycles([
        { from: "coordinator/endpoints/a.ts", to: "coordinator/http/b.ts" },
        { from: "coordinator/http/b.ts", to: "coordinator/endpoints/c.ts" },
      ]),
      [["endpoints", "http"]],
    );
  });
});
