// Fully populated wire values (a container status, an image summary) for the
// round-trip tests of the gRPC transport and the CLI's output. Their own
// module because they are fixtures of the wire format, used with or without
// the in-memory agent (fake-container-api.ts starts from them too).

import type { ContainerStatus, ImageSummary } from "../../api/index.ts";

/** A status with every field set, for wire round trips and CLI output. */
export function sampleStatus(id: string, over: Partial<ContainerStatus> = {}): ContainerStatus {
  return {
    id,
    image: "docker.io/library/python:3.12-slim",
    imageDigest: "sha256:0123456789abcdef",
    state: "running",
    pid: 4242,
    createdAt: 1_700_000_000_123,
    startedAt: 1_700_000_000_456,
    labels: { app: "web", "berth.dev/sandbox": "sb-1" },
    cpu: 0.5,
    memoryBytes: 64 * 1024 * 1024,
    gpus: [],
    ipv4: "10.88.0.2",
    egress: { mode: "open" },
    exposedPorts: [],
    ...over,
  };
}

export const sampleImage: ImageSummary = {
  ref: "docker.io/library/python:3.12-slim",
  refs: ["docker.io/library/python:3.12-slim", "python:3.12-slim"],
  digest: "sha256:feedface",
  // Above 2^32, so a uint64 truncated to 32 bits would show.
  sizeBytes: 5_000_000_000,
  pulledAt: "2024-05-01T12:00:00.000Z",
  inUse: true,
};

/** The fields sampleStatus sets that a run does not: what the transport tests' fake answers with. */
export const SAMPLE_STATUS_DEFAULTS: Partial<ContainerStatus> = {
  imageDigest: "sha256:0123456789abcdef",
  pid: 4242,
  createdAt: 1_700_000_000_123,
  startedAt: 1_700_000_000_456,
  ipv4: "10.88.0.2",
};
