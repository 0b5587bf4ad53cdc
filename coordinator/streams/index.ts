// The streams area's entry point: what other areas may use of it.
export { CLAIMS_WAIT_MS, ClusterClaims } from "./claims.ts";
export { OrphanSweep } from "./orphan-sweep.ts";
export { streamReplicas } from "./replicas.ts";
export { scanStored } from "./scan.ts";
export type { ScanStart } from "./scan.ts";
export { RelayRouter } from "./relay-router.ts";
export type { RelayedCall, RelayHandler } from "./relay-router.ts";
