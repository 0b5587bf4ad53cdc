#!/usr/bin/env node
// The entry of the bundled CLI (`npm run build` → dist/cli/berth.js, the
// `berth` of the npm package; scripts/build.ts). From the sources, cli/bin.js
// and `node --import tsx cli/main.ts` run main.ts instead.
import { main } from "./main.ts";

await main(process.argv);
