// The outputs area (docs/outputs.md): containers' uploads through their
// agents' relay, their signed public URLs, and the sweep of expired ones.
import type { Logger } from "pino";
import { describeError } from "../../shared/errors.ts";
import type { Area, AreaRoutes } from "../http/index.ts";
import type { RelayRouter } from "../streams/index.ts";
import { OutputStore, type OutputStoreOptions } from "./output-store.ts";
import { serveOutputOps } from "./relay-ops.ts";
import { outputPublicRoutes } from "./routes.ts";

/** How often expired outputs are deleted: a file outlives its URL by at most this. */
export const OUTPUT_SWEEP_MS = 5_000;

export function outputsHttpRoutes(outputs: OutputStore): AreaRoutes {
  return { public: [outputPublicRoutes(outputs)] };
}

export interface OutputsDeps extends OutputStoreOptions {
  relay: Pick<RelayRouter, "serve">;
  log: Logger;
}

export function createOutputs(d: OutputsDeps): Area<OutputStore> {
  const { relay, log, ...options } = d;
  const outputs = new OutputStore(options);
  serveOutputOps(relay, outputs);
  let stopSweeper: (() => void) | undefined;
  return {
    service: outputs,
    routes: outputsHttpRoutes(outputs),
    start() {
      stopSweeper = outputs.startSweeper(OUTPUT_SWEEP_MS, (e) =>
        log.error({ err: describeError(e) }, "sweeping expired outputs failed"),
      );
    },
    stop: () => stopSweeper?.(),
  };
}
