export { serveOutputOps } from "./relay-ops.ts";
export { OutputStore, type OutputJson, type OutputRecord, MAX_OUTPUT_BYTES } from "./output-store.ts";

/** How often expired outputs are deleted: a file outlives its URL by at most this. */
export const OUTPUT_SWEEP_MS = 5_000;
export { outputPublicRoutes } from "./routes.ts";
