// Every listing command of the CLI takes --json, including ones added later:
// the command tree is walked, not a list kept by hand.

import assert from "node:assert/strict";
import { test } from "node:test";
import type { Command } from "commander";
import { buildProgram } from "../../cli/main.ts";

/** Subcommands that list things: `list`, `ls`, `ps`, `images`. */
const LISTING = /^(list|ls|ps|images)$/;

function walk(cmd: Command, path: string[] = []): { path: string[]; cmd: Command }[] {
  return cmd.commands.flatMap((c) => [
    { path: [...path, c.name()], cmd: c },
    ...walk(c, [...path, c.name()]),
  ]);
}

test("every listing command takes --json", () => {
  const listings = walk(buildProgram()).filter((c) => LISTING.test(c.cmd.name()));
  // The walk finds the known ones, so an empty or broken walk cannot pass.
  const names = listings.map((c) => c.path.join(" "));
  for (const known of [
    "deployment list",
    "agent list",
    "agent ps",
    "agent images",
    "secret list",
    "volume ls",
  ])
    assert.ok(names.includes(known), `${known} in ${names.join(", ")}`);
  const without = listings
    .filter((c) => !c.cmd.options.some((o) => o.long === "--json"))
    .map((c) => c.path.join(" "));
  assert.deepEqual(without, [], "listing commands without --json");
});
