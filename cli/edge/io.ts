// What the edge commands need from the outside world, passed in so tests can
// drive them in-process: a way to reach the agent, the standard streams, the
// exit code and the signals that interrupt a command.

import { constants as fsConstants } from "node:fs";
import { access, lstat } from "node:fs/promises";
import type { ContainerApi } from "../../api/index.ts";
import { BerthError } from "../../shared/errors.ts";

export type EdgeClient = ContainerApi & { close(): void };

export interface EdgeIo {
  /** Opens a client to the agent listening on the unix socket at `socketPath`. */
  connect(socketPath: string): Promise<EdgeClient>;
  stdout: NodeJS.WritableStream;
  stderr: NodeJS.WritableStream;
  stdin: NodeJS.ReadableStream;
  env: NodeJS.ProcessEnv;
  setExitCode(code: number): void;
  /** Emits "SIGINT"/"SIGTERM" when the user interrupts. */
  signals: Pick<NodeJS.EventEmitter, "on" | "off">;
}

/** Turns the usual ways of not reaching the socket into one clear line. */
export async function checkAgentSocket(path: string): Promise<void> {
  const st = await lstat(path).catch((e: NodeJS.ErrnoException) => e);
  if (st instanceof Error) {
    if (st.code === "ENOENT") {
      throw new BerthError(
        "unavailable",
        `no agent socket at ${path}: is \`berth agent\` running? (pick another with --socket, ` +
          "`berth agent --data-dir DIR`, or $BERTH_AGENT_SOCKET; `berth up` saves its agent's socket " +
          "in the CLI profile)",
      );
    }
    if (st.code === "EACCES") throw permissionDenied(path);
    throw new BerthError("unavailable", `cannot reach the agent socket ${path}: ${st.message}`);
  }
  if (!st.isSocket()) throw new BerthError("failed_precondition", `${path} is not a unix socket`);
  await access(path, fsConstants.R_OK | fsConstants.W_OK).catch(() => {
    throw permissionDenied(path);
  });
}

function permissionDenied(path: string): BerthError {
  return new BerthError(
    "permission_denied",
    `permission denied on ${path}: the agent socket is for root only (run the command as root, e.g. with sudo)`,
  );
}

export function processIo(): EdgeIo {
  return {
    async connect(socketPath) {
      await checkAgentSocket(socketPath);
      // Loaded here, not at the top: the gRPC client is heavy and `berth --help` never needs it.
      const { AgentRpcClient } = await import("../../api/grpc/index.ts");
      return new AgentRpcClient({ address: `unix://${socketPath}` });
    },
    stdout: process.stdout,
    stderr: process.stderr,
    stdin: process.stdin,
    env: process.env,
    setExitCode(code) {
      process.exitCode = code;
    },
    signals: process,
  };
}
