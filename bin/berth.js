#!/usr/bin/env node
// The `berth` command (package.json "bin"). In a checkout, where the
// TypeScript sources sit beside it, it runs them through tsx (cli/bin.js):
// always the current code, no build step, so `berth` works right after
// `npm start`. The npm package ships the bundle instead of the sources
// (`npm run build`, run by `npm pack`): there it runs dist/cli/berth.js.
import { existsSync } from "node:fs";

const root = new URL("../", import.meta.url);
const entry = existsSync(new URL("cli/main.ts", root)) ? "cli/bin.js" : "dist/cli/berth.js";
await import(new URL(entry, root).href);
