// A small AgentApi for exercising the transport: it answers from fields the
// test sets and counts calls, so a test can tell whether a request reached it.

import type { AgentApi, AgentHealth } from "../../api/index.ts";
import type { HostCapacity } from "../../shared/fleet.ts";

export const sampleCapacity: HostCapacity = {
  cpuCores: 96,
  // Above 2^32, so a uint64 truncated to 32 bits would show.
  memoryBytes: 1_099_511_627_776 + 123,
  disk: { path: "/var/lib/berth-agent", totalBytes: 3_840_755_982_336, freeBytes: 2_000_000_000_001 },
  gpus: {
    available: true,
    driverVersion: "550.54.15",
    cudaVersion: "12.4",
    toolkit: true,
    devices: [
      { index: 0, uuid: "GPU-aaaa", model: "NVIDIA H100 80GB HBM3", type: "H100", memoryMiB: 81559 },
      {
        index: 1,
        uuid: "MIG-bbbb",
        model: "NVIDIA H100 80GB HBM3",
        type: "H100",
        memoryMiB: 9856,
        mig: { profile: "1g.10gb", parentUuid: "GPU-cccc", gi: 9, ci: 0 },
      },
      {
        index: 2,
        uuid: "GPU-dddd",
        model: "NVIDIA H100 80GB HBM3",
        type: "H100",
        memoryMiB: 81559,
        shared: true,
      },
    ],
  },
};

export const noGpuCapacity: HostCapacity = {
  cpuCores: 1.5,
  memoryBytes: 2_147_483_648,
  disk: { path: "/data", totalBytes: 10, freeBytes: 0 },
  gpus: { available: false, reason: "nvidia-smi not found", toolkit: false, devices: [] },
};

export class FakeAgent implements AgentApi {
  calls = 0;
  healthReply: AgentHealth = {
    status: "SERVING",
    agentId: "agent-test1",
    version: "0.1.0",
    uptimeMs: 4_321_000,
  };
  capacityReply: HostCapacity = sampleCapacity;
  /** When set, every call rejects with it. */
  failWith?: unknown;
  /** When set, every call waits for this before answering. */
  hold?: Promise<void>;

  async health(): Promise<AgentHealth> {
    return this.answer(this.healthReply);
  }

  async capacity(): Promise<HostCapacity> {
    return this.answer(this.capacityReply);
  }

  private async answer<T>(value: T): Promise<T> {
    this.calls++;
    if (this.hold) await this.hold;
    if (this.failWith !== undefined) throw this.failWith;
    return value;
  }
}
