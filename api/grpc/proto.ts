// Loads proto/agent.proto once per caller (no module-level cache: the server
// and client each hold what they loaded). The path is found from this file,
// not from the working directory, so `berth` works from anywhere.

import { fileURLToPath } from "node:url";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";

export const AGENT_PROTO_PATH = fileURLToPath(new URL("../../proto/agent.proto", import.meta.url));
export const AGENT_SERVICE_NAME = "berth.agent.v1.Agent";

// longs: Number keeps sizes as JS numbers (exact below 2^53); enums as their
// names; defaults so absent scalars read as 0/""/false, while proto3
// `optional` fields and unset messages stay absent/null (checked in convert.ts).
const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: false,
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
};

export interface LoadedAgentProto {
  service: grpc.ServiceDefinition;
  Client: grpc.ServiceClientConstructor;
}

export function loadAgentProto(): LoadedAgentProto {
  const definition = protoLoader.loadSync(AGENT_PROTO_PATH, LOADER_OPTIONS);
  const loaded = grpc.loadPackageDefinition(definition);
  const Client = (loaded.berth as grpc.GrpcObject)?.agent as grpc.GrpcObject | undefined;
  const ctor = (Client?.v1 as grpc.GrpcObject | undefined)?.Agent as
    | grpc.ServiceClientConstructor
    | undefined;
  if (!ctor) throw new Error(`${AGENT_PROTO_PATH} does not define service ${AGENT_SERVICE_NAME}`);
  return { service: ctor.service, Client: ctor };
}
