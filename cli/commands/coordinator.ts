import type { Command } from "commander";
import type { CoordinatorOptions } from "../../coordinator/options.ts";
import { runUntilSignal } from "./serve-process.ts";

export function coordinatorCommand(program: Command): void {
  program
    .command("coordinator")
    .description("run a coordinator (HTTP API, scheduler, fleet view) in the foreground")
    .option("--config <file>", "JSON config file (see docs/install.md)")
    .option("--host <host>", "address to listen on")
    .option("--port <port>", "port to listen on", (v) => Number(v))
    .option("--store <url>", "sqlite:PATH or postgres://...")
    .option("--data-dir <dir>", "state directory")
    .option("--public-url <url>", "URL clients use")
    .option("--tls-cert <file>", "serve HTTPS with this PEM certificate (chain); needs --tls-key")
    .option("--tls-key <file>", "the PEM private key of --tls-cert")
    .action(
      async (opts: {
        config?: string;
        host?: string;
        port?: number;
        store?: string;
        dataDir?: string;
        publicUrl?: string;
        tlsCert?: string;
        tlsKey?: string;
      }) => {
        // Loaded here, not at the top: `berth --help` and the other commands never pay for the coordinator.
        const { startCoordinator } = await import("../../coordinator/main.ts");
        const { readCoordinatorConfig, resolveCoordinatorOptions } = await import(
          "../../coordinator/options.ts"
        );
        await runUntilSignal("coordinator", async () => {
          const file: Partial<CoordinatorOptions> = opts.config ? readCoordinatorConfig(opts.config) : {};
          const merged = {
            ...file,
            ...(opts.host ? { host: opts.host } : {}),
            ...(opts.port !== undefined ? { port: opts.port } : {}),
            ...(opts.store ? { store: opts.store } : {}),
            ...(opts.dataDir ? { dataDir: opts.dataDir } : {}),
            ...(opts.publicUrl ? { publicUrl: opts.publicUrl } : {}),
            ...tlsFlags(file.tls, opts.tlsCert, opts.tlsKey),
          } as CoordinatorOptions;
          return startCoordinator(resolveCoordinatorOptions(merged));
        });
      },
    );
}

/** --tls-cert/--tls-key over the config file's `tls`, field by field (a missing half is reported by resolve). */
function tlsFlags(
  file: CoordinatorOptions["tls"],
  certFile: string | undefined,
  keyFile: string | undefined,
): Pick<CoordinatorOptions, "tls"> {
  if (certFile === undefined && keyFile === undefined) return {};
  return {
    tls: {
      ...file,
      ...(certFile !== undefined ? { certFile } : {}),
      ...(keyFile !== undefined ? { keyFile } : {}),
    } as NonNullable<CoordinatorOptions["tls"]>,
  };
}
