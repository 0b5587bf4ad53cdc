// fromProto/toProto for every agent.proto message. The wire shapes below are
// what @grpc/proto-loader produces with the options in proto.ts; they never
// leave agent/rpc.

import { BerthError } from "../../shared/errors.ts";
import type { GpuDevice, GpuReport, HostCapacity } from "../../shared/fleet.ts";
import type { AgentHealth } from "../agent.ts";

type WireServingStatus = "SERVING_STATUS_UNSPECIFIED" | "SERVING" | "NOT_SERVING";

export interface WireHealthResponse {
  status: WireServingStatus;
  agentId: string;
  version: string;
  uptimeMs: number;
}

export interface WireDisk {
  path: string;
  totalBytes: number;
  freeBytes: number;
}

export interface WireMigInstance {
  profile: string;
  parentUuid: string;
  gi?: number;
  ci?: number;
}

export interface WireGpuDevice {
  index: number;
  uuid: string;
  model: string;
  type: string;
  memoryMib: number;
  mig?: WireMigInstance | null;
  shared?: boolean;
}

export interface WireGpuReport {
  available: boolean;
  reason?: string;
  driverVersion?: string;
  cudaVersion?: string;
  toolkit: boolean;
  devices: WireGpuDevice[];
}

export interface WireCapacity {
  cpuCores: number;
  memoryBytes: number;
  disk?: WireDisk | null;
  gpus?: WireGpuReport | null;
}

// A uint64 on the wire: negative, fractional or non-finite values would be
// silently mangled by protobuf, so they are refused before encoding.
function uint64(value: number, field: string): number {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new BerthError("internal", `${field} must be a non-negative integer, got ${value}`);
  }
  return value;
}

function uint32(value: number, field: string): number {
  if (!Number.isInteger(value) || value < 0 || value > 0xffff_ffff) {
    throw new BerthError("internal", `${field} must be a uint32, got ${value}`);
  }
  return value;
}

function malformed(what: string): BerthError {
  return new BerthError("internal", `the agent sent a malformed reply: ${what}`);
}

export function healthToProto(h: AgentHealth): WireHealthResponse {
  return {
    status: h.status,
    agentId: h.agentId,
    version: h.version,
    uptimeMs: uint64(Math.floor(h.uptimeMs), "uptimeMs"),
  };
}

export function healthFromProto(w: WireHealthResponse): AgentHealth {
  if (w.status !== "SERVING" && w.status !== "NOT_SERVING") {
    throw malformed(`health status is ${w.status}`);
  }
  return { status: w.status, agentId: w.agentId, version: w.version, uptimeMs: w.uptimeMs };
}

function gpuDeviceToProto(d: GpuDevice, i: number): WireGpuDevice {
  return {
    index: uint32(d.index, `gpus.devices[${i}].index`),
    uuid: d.uuid,
    model: d.model,
    type: d.type,
    memoryMib: uint64(d.memoryMiB, `gpus.devices[${i}].memoryMiB`),
    mig: d.mig
      ? {
          profile: d.mig.profile,
          parentUuid: d.mig.parentUuid,
          ...(d.mig.gi !== undefined ? { gi: uint32(d.mig.gi, `gpus.devices[${i}].mig.gi`) } : {}),
          ...(d.mig.ci !== undefined ? { ci: uint32(d.mig.ci, `gpus.devices[${i}].mig.ci`) } : {}),
        }
      : null,
    ...(d.shared ? { shared: true } : {}),
  };
}

function gpuDeviceFromProto(w: WireGpuDevice): GpuDevice {
  const d: GpuDevice = { index: w.index, uuid: w.uuid, model: w.model, type: w.type, memoryMiB: w.memoryMib };
  if (w.mig) {
    d.mig = { profile: w.mig.profile, parentUuid: w.mig.parentUuid };
    if (w.mig.gi !== undefined && w.mig.gi !== null) d.mig.gi = w.mig.gi;
    if (w.mig.ci !== undefined && w.mig.ci !== null) d.mig.ci = w.mig.ci;
  }
  if (w.shared) d.shared = true;
  return d;
}

function gpuReportToProto(g: GpuReport): WireGpuReport {
  const w: WireGpuReport = {
    available: g.available,
    toolkit: g.toolkit,
    devices: g.devices.map(gpuDeviceToProto),
  };
  if (g.reason !== undefined) w.reason = g.reason;
  if (g.driverVersion !== undefined) w.driverVersion = g.driverVersion;
  if (g.cudaVersion !== undefined) w.cudaVersion = g.cudaVersion;
  return w;
}

function gpuReportFromProto(w: WireGpuReport): GpuReport {
  const g: GpuReport = {
    available: w.available,
    toolkit: w.toolkit,
    devices: w.devices.map(gpuDeviceFromProto),
  };
  // proto3 `optional` fields are absent (not "") when unset.
  if (w.reason !== undefined) g.reason = w.reason;
  if (w.driverVersion !== undefined) g.driverVersion = w.driverVersion;
  if (w.cudaVersion !== undefined) g.cudaVersion = w.cudaVersion;
  return g;
}

export function capacityToProto(c: HostCapacity): WireCapacity {
  if (!Number.isFinite(c.cpuCores) || c.cpuCores < 0) {
    throw new BerthError("internal", `cpuCores must be a non-negative number, got ${c.cpuCores}`);
  }
  return {
    cpuCores: c.cpuCores,
    memoryBytes: uint64(c.memoryBytes, "memoryBytes"),
    disk: {
      path: c.disk.path,
      totalBytes: uint64(c.disk.totalBytes, "disk.totalBytes"),
      freeBytes: uint64(c.disk.freeBytes, "disk.freeBytes"),
    },
    gpus: gpuReportToProto(c.gpus),
  };
}

export function capacityFromProto(w: WireCapacity): HostCapacity {
  if (!w.disk) throw malformed("capacity has no disk");
  if (!w.gpus) throw malformed("capacity has no gpus report");
  return {
    cpuCores: w.cpuCores,
    memoryBytes: w.memoryBytes,
    disk: { path: w.disk.path, totalBytes: w.disk.totalBytes, freeBytes: w.disk.freeBytes },
    gpus: gpuReportFromProto(w.gpus),
  };
}
