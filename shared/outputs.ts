// The wire of containers' Outputs (docs/outputs.md): a container's agent
// relays its uploads and URL requests to the coordinators over NATS, as it
// does Queue and Map calls. Chunks carry raw bytes with their offset in
// headers; every other operation is JSON. The workspace is the agent's word
// for the container that asked.

import { AGENT_PREFIX } from "./subjects.ts";

export const outputSubjects = {
  request: (agentId: string) => `${AGENT_PREFIX}.${agentId}.output`,
  allRequests: `${AGENT_PREFIX}.*.output`,
} as const;

/** Bytes of one chunk: under NATS's default 1 MiB payload with room for headers. */
export const OUTPUT_CHUNK_BYTES = 512 * 1024;

export type OutputOp = "begin" | "chunk" | "commit" | "url" | "stat";

/** Headers of every relayed output request. */
export const OUTPUT_HEADERS = {
  op: "Berth-Op",
  workspace: "Berth-Workspace",
  upload: "Berth-Upload",
  offset: "Berth-Offset",
} as const;

/** The JSON body of commit, url and stat. */
export interface OutputCall {
  upload?: string;
  name?: string;
  task_id?: string;
  size?: number;
  id?: string;
  expires?: number;
}

export type OutputReply =
  | ({ ok: true } & Record<string, unknown>)
  | { ok: false; error: { code: string; message: string } };
