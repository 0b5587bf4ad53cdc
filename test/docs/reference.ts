// The reference pages, written from what berth itself serves: the CLI's own
// help for every command (docs/reference/cli.md) and the coordinator's
// OpenAPI document (docs/reference/rest.md). test/docs/reference.test.ts
// checks the committed pages against these; `npm run docs:reference`
// writes them.

import type { Command } from "commander";

const HELP_WIDTH = 100;

/** Every command's `--help`, in the order the CLI lists them. */
export function cliReference(program: Command): string {
  const out = [
    "# CLI reference",
    "",
    "Every `berth` command's own `--help`, written from the CLI by `npm run docs:reference`",
    "(a test fails when this page and the CLI differ). The guides say when to use which:",
    "[getting started](../getting-started.md), [operations](../operations.md).",
    "",
  ];
  const walk = (c: Command, path: string[]) => {
    c.configureHelp({ helpWidth: HELP_WIDTH });
    out.push(`## ${path.join(" ")}`, "", "```text", c.helpInformation().trimEnd(), "```", "");
    for (const sub of c.commands) {
      if ((sub as Command & { _hidden?: boolean })._hidden) continue;
      walk(sub, [...path, sub.name()]);
    }
  };
  walk(program, [program.name()]);
  return `${out.join("\n").trimEnd()}\n`;
}

interface Operation {
  summary?: string;
  description?: string;
  tags?: string[];
  security?: unknown[];
  "x-berth-role"?: string[];
  "x-berth-deployment"?: boolean;
  "x-berth-audit"?: string;
}

const METHODS = ["get", "post", "put", "patch", "delete"];

/** One table per tag: method, path, who may call it, what it does. */
export function restReference(doc: { paths: Record<string, Record<string, Operation>> }): string {
  const byTag = new Map<string, string[]>();
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of METHODS) {
      const op = item[method];
      if (!op) continue;
      const who =
        Array.isArray(op.security) && op.security.length === 0
          ? "no token"
          : [
              (op["x-berth-role"] ?? []).join(", "),
              ...(op["x-berth-deployment"] ? ["narrowed tokens too"] : []),
            ].join("; ");
      const what = [op.summary ?? "", ...(op["x-berth-audit"] ? [`audited as \`${op["x-berth-audit"]}\``] : [])]
        .filter(Boolean)
        .join("; ");
      const tag = op.tags?.[0] ?? "other";
      const rows = byTag.get(tag) ?? [];
      rows.push(`| ${method.toUpperCase()} | \`${path}\` | ${who} | ${cell(what)} |`);
      byTag.set(tag, rows);
    }
  }
  const out = [
    "# REST reference",
    "",
    "Every route of the coordinator's API, written from its OpenAPI document",
    "(`GET /api/v1/openapi.json`, which also has each route's parameters and",
    "bodies) by `npm run docs:reference`; a test fails when this page and the",
    "coordinator differ. **Who** lists the token roles that may call a route",
    "([roles](../roles.md)); the guide to the API is [api](../api.md).",
    "",
  ];
  for (const tag of [...byTag.keys()].sort()) {
    out.push(`## ${tag}`, "", "| Method | Path | Who | What |", "| --- | --- | --- | --- |");
    out.push(...(byTag.get(tag) ?? []), "");
  }
  return `${out.join("\n").trimEnd()}\n`;
}

function cell(s: string): string {
  return s.replaceAll("|", "\\|").replaceAll("\n", " ");
}
