// The agent's API over gRPC (proto/agent.proto): the client the coordinator
// and the CLI use, and the wire forms and error mapping that the client and
// the agent's server (agent/rpc) share, so both ends convert alike. Protobuf
// shapes stop here and in agent/rpc; everything else speaks ../index.ts.

export * from "./agent-convert.ts";
export * from "./async-queue.ts";
export * from "./build-convert.ts";
export * from "./client.ts";
export * from "./container-client.ts";
export * from "./container-convert.ts";
export * from "./errors.ts";
export * from "./exec-client.ts";
export * from "./files-convert.ts";
export * from "./image-convert.ts";
export * from "./proto.ts";
export * from "./sandbox-client.ts";
export * from "./process-client.ts";
export * from "./process-channel.ts";
