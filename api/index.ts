// The contract between berth's processes: what the coordinator, the CLI and
// edge tools may know of an agent. The agent's host (agent/host) implements
// these interfaces locally and the gRPC client (./grpc/index.ts) remotely;
// one conformance suite (test/conformance/) holds both to them. Outside api/,
// import this file or ./grpc/index.ts, never a file beside them
// (test/architecture/imports.test.ts checks it; docs/architecture.md).

export * from "./agent.ts";
export * from "./builds.ts";
export * from "./containers.ts";
export * from "./files.ts";
export * from "./process-delegation.ts";
export * from "./processes.ts";
export * from "./snapshots.ts";
export * from "./tunnel.ts";
