// The import rules of docs/architecture.md, checked on every source file:
// processes meet only through the contract (api/), packages expose entry
// points, the coordinator's areas are modules (reached only through their
// index.ts), sit in tiers that import only downwards and form no cycle, and
// shared/ holds only what two processes use. A rule broken here is a design
// change: change docs/architecture.md with it, not this test alone.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
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

/**
 * The coordinator's tiers, lowest first: an area imports areas of its own tier
 * or below, never above. Every area has a tier (a new folder must be placed).
 */
export const TIERS: Record<string, readonly string[]> = {
  foundation: ["store", "streams", "pki", "http"],
  core: [
    "fleet",
    "scheduler",
    "secrets",
    "limits",
    "objects",
    "volumes",
    "workspaces",
    "sso",
    "tasks",
    "containers",
    "events",
    "logs",
    "metrics",
  ],
  products: [
    "functions",
    "deployments",
    "endpoints",
    "schedules",
    "images",
    "sandboxes",
    "ports",
    "inference",
    "bots",
    "databases",
    "stacks",
    "webhooks",
    "outputs",
    "state",
    "usage",
  ],
  edge: ["edge", "dashboard"],
};
const TIER_ORDER = Object.keys(TIERS);
const tierOf = (area: string): number => TIER_ORDER.findIndex((t) => TIERS[t]?.includes(area));
const isEntryPoint = (p: string): boolean => /^coordinator\/[^/]+\/index\.ts$/.test(p);

/** Breaches of the coordinator's module rules: entry points only across areas, tiers downwards. */
export function areaBreaches(edges: Edge[]): string[] {
  const out: string[] = [];
  for (const e of edges) {
    if (top(e.from) !== "coordinator" || top(e.to) !== "coordinator") continue;
    const a = coordinatorArea(e.from);
    const b = coordinatorArea(e.to);
    if (a === b) continue;
    if (b === "(root)") {
      out.push(`${e.from} -> ${e.to}: an area never imports the composition root`);
      continue;
    }
    for (const area of [a, b]) {
      if (area !== "(root)" && tierOf(area) < 0)
        out.push(`${e.from} -> ${e.to}: area ${area} has no tier (add it to TIERS and docs/architecture.md)`);
    }
    if (!isEntryPoint(e.to))
      out.push(
        `${e.from} -> ${e.to}: another area is reached through its entry point, coordinator/${b}/index.ts`,
      );
    if (a !== "(root)" && tierOf(a) >= 0 && tierOf(b) > tierOf(a))
      out.push(
        `${e.from} -> ${e.to}: ${a} (${TIER_ORDER[tierOf(a)]}) imports ${b} (${TIER_ORDER[tierOf(b)]}), a higher tier`,
      );
  }
  return out;
}

/**
 * shared/ files used by fewer than two processes (coordinator, agent, cli,
 * dashboard), through any chain of shared/ files; api/ is the coordinator's
 * and the agent's contract, so what it imports counts for both.
 */
export function sharedByOne(edges: Edge[], sharedFiles: string[]): string[] {
  const users = new Map<string, Set<string>>(sharedFiles.map((f) => [f, new Set()]));
  const processesOf = (f: string): string[] => (top(f) === "api" ? ["coordinator", "agent"] : [top(f)]);
  for (let grew = true; grew; ) {
    grew = false;
    for (const e of edges) {
      const into = users.get(e.to);
      if (!into) continue;
      const from = top(e.from) === "shared" ? [...(users.get(e.from) ?? [])] : processesOf(e.from);
      for (const p of from) {
        if (!into.has(p)) {
          into.add(p);
          grew = true;
        }
      }
    }
  }
  return [...users]
    .filter(([, u]) => u.size < 2)
    .map(([f, u]) => `${f} is used by ${[...u].join(", ") || "nothing"} alone: move it into that process`);
}

type Rule = (e: Edge) => string | undefined;

const RULES: Rule[] = [
  (e) =>
    ["coordinator", "cli"].includes(top(e.from)) &&
    top(e.to) === "agent" &&
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
  (e) =>
    top(e.from) === "shared" && top(e.to) !== "shared"
      ? "shared/ imports nothing outside shared/"
      : undefined,
  (e) =>
    top(e.from) === "agent" && ["coordinator", "cli"].includes(top(e.to))
      ? "the agent never imports the coordinator or the CLI"
      : undefined,
  (e) =>
    top(e.from) === "coordinator" && top(e.to) === "cli"
      ? "the coordinator never imports the CLI"
      : undefined,
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
    assert.ok(edges.some((e) => e.from.startsWith("coordinator/edge/") && isEntryPoint(e.to)));
  });

  test("processes meet through the contract; packages through their entry points", () => {
    assert.deepEqual(ruleBreaches(edges), []);
  });

  test("coordinator areas: entry points only, tiers import downwards", () => {
    assert.deepEqual(areaBreaches(edges), []);
  });

  test("every coordinator folder is an area with a tier and an entry point", () => {
    const folders = readdirSync(resolve(ROOT, "coordinator"), { withFileTypes: true })
      .filter((d) => d.isDirectory())
      .map((d) => d.name);
    const placed = Object.values(TIERS).flat();
    assert.deepEqual(
      folders.filter((f) => !placed.includes(f)),
      [],
      "folders without a tier",
    );
    assert.deepEqual(
      placed.filter((f) => !folders.includes(f)),
      [],
      "tiers naming no folder",
    );
    const imported = new Set(edges.map((e) => e.to));
    for (const f of folders) {
      if (imported.has(`coordinator/${f}/index.ts`) || f === "edge")
        assert.ok(existsSync(resolve(ROOT, "coordinator", f, "index.ts")), `coordinator/${f}/index.ts`);
    }
  });

  test("no cycle among the coordinator's areas", () => {
    assert.deepEqual(areaCycles(edges), []);
  });

  test("shared/ holds only what two processes use", () => {
    const shared = edges
      .map((e) => e.from)
      .filter((f, i, all) => top(f) === "shared" && all.indexOf(f) === i);
    const files = readdirSync(resolve(ROOT, "shared")).filter(
      (f) => f.endsWith(".ts") && !f.endsWith(".test.ts"),
    );
    assert.deepEqual(sharedByOne(edges, [...new Set([...shared, ...files.map((f) => `shared/${f}`)])]), []);
  });

  test("the checks fail on a breach", () => {
    assert.equal(ruleBreaches([{ from: "coordinator/x/y.ts", to: "agent/rpc/server.ts" }]).length, 1);
    assert.equal(ruleBreaches([{ from: "cli/a.ts", to: "api/containers.ts" }]).length, 1);
    assert.equal(ruleBreaches([{ from: "api/containers.ts", to: "agent/host/host.ts" }]).length, 1);
    assert.equal(ruleBreaches([{ from: "cli/commands/agent.ts", to: "agent/main.ts" }]).length, 0);
    assert.deepEqual(
      areaCycles([
        { from: "coordinator/endpoints/a.ts", to: "coordinator/deployments/b.ts" },
        { from: "coordinator/deployments/b.ts", to: "coordinator/endpoints/c.ts" },
      ]),
      [["deployments", "endpoints"]],
    );
    // A deep file of another area, from an area and from the root.
    assert.match(
      areaBreaches([{ from: "coordinator/bots/engine.ts", to: "coordinator/deployments/service.ts" }]).join(),
      /through its entry point/,
    );
    assert.match(
      areaBreaches([{ from: "coordinator/main.ts", to: "coordinator/tasks/service.ts" }]).join(),
      /through its entry point/,
    );
    assert.deepEqual(
      areaBreaches([{ from: "coordinator/bots/engine.ts", to: "coordinator/deployments/index.ts" }]),
      [],
    );
    // Upwards: core -> products, foundation -> core, products -> edge.
    assert.match(
      areaBreaches([{ from: "coordinator/tasks/service.ts", to: "coordinator/deployments/index.ts" }]).join(),
      /tasks \(core\) imports deployments \(products\), a higher tier/,
    );
    assert.match(
      areaBreaches([{ from: "coordinator/store/db.ts", to: "coordinator/fleet/index.ts" }]).join(),
      /higher tier/,
    );
    assert.match(
      areaBreaches([{ from: "coordinator/inference/gateway.ts", to: "coordinator/edge/index.ts" }]).join(),
      /higher tier/,
    );
    // An area without a tier; an area importing the root.
    assert.match(
      areaBreaches([{ from: "coordinator/newthing/a.ts", to: "coordinator/store/index.ts" }]).join(),
      /no tier/,
    );
    assert.match(
      areaBreaches([{ from: "coordinator/tasks/a.ts", to: "coordinator/options.ts" }]).join(),
      /composition root/,
    );
    // shared/: a file only the CLI reaches, directly or through another shared file.
    assert.deepEqual(
      sharedByOne(
        [
          { from: "cli/up/registry.ts", to: "shared/only-cli.ts" },
          { from: "shared/only-cli.ts", to: "shared/helper.ts" },
          { from: "agent/main.ts", to: "shared/both.ts" },
          { from: "api/index.ts", to: "shared/contract.ts" },
          { from: "cli/x.ts", to: "shared/both.ts" },
        ],
        ["shared/only-cli.ts", "shared/helper.ts", "shared/both.ts", "shared/contract.ts"],
      ).map((l) => l.split(" ")[0]),
      ["shared/only-cli.ts", "shared/helper.ts"],
    );
  });
});
