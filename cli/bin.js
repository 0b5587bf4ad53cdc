#!/usr/bin/env node
// The `berth` executable: loads the TypeScript sources through tsx.
import { register } from "tsx/esm/api";

register();
const { main } = await import("./main.ts");
await main(process.argv);
