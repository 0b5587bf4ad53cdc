export { serveOutputOps } from "./relay-ops.ts";
export { OutputStore, type OutputJson, type OutputRecord, MAX_OUTPUT_BYTES } from "./output-store.ts";
export { OUTPUT_SWEEP_MS, createOutputs, outputsHttpRoutes } from "./area.ts";
export { outputPublicRoutes } from "./routes.ts";
