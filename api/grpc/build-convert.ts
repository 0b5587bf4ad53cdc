// BuildImage on the wire: the request and the event oneof, both ways.

import { BerthError } from "../../shared/errors.ts";
import type { BuildEvent, BuildImageRequest } from "../builds.ts";

export interface WireBuildImageRequest {
  baseImage: string;
  baseCredentials: { username: string; password: string } | null;
  steps: { name: string; run: string; codeSha256: string; micromamba?: boolean }[];
  env: Record<string, string>;
  secretEnv: Record<string, string>;
  baseImageCreds: Record<string, string>;
  cpu: number;
  memoryBytes: number;
  pushRepository: string;
  gpu?: { count: number; types: string[] } | null;
}

type WireStream = "LOG_STREAM_STDOUT" | "LOG_STREAM_STDERR" | "LOG_STREAM_UNSPECIFIED";

export type WireBuildEvent =
  | { event: "base"; base: { imageId: string; ref: string; digest: string } }
  | { event: "step"; step: { index: number; total: number; name: string; cached: boolean } }
  | { event: "output"; output: { index: number; stream: WireStream; line: string } }
  | { event: "stepDone"; stepDone: { index: number; cached: boolean; seconds: number; digest: string } }
  | { event: "pull"; pull: WireBlobProgress }
  | {
      event: "push";
      push: {
        ref: string;
        blobsDone: number;
        blobsTotal: number;
        bytesDone: number | string;
        bytesTotal: number | string;
        blobsSkipped: number;
      };
    }
  | {
      event: "done";
      done: {
        imageId: string;
        ref: string;
        digest: string;
        cachedSteps: number;
        builtSteps: number;
        pushedRef: string;
      };
    };

/** BuildPull (and BuildPush's counters): uint64 arrives as a string. */
interface WireBlobProgress {
  ref: string;
  blobsDone: number;
  blobsTotal: number;
  bytesDone: number | string;
  bytesTotal: number | string;
  blobsSkipped: number;
}

export function buildRequestToProto(r: BuildImageRequest): WireBuildImageRequest {
  return {
    baseImage: r.baseImage ?? "",
    baseCredentials: r.baseCredentials
      ? { username: r.baseCredentials.username, password: r.baseCredentials.password }
      : null,
    steps: r.steps.map((s) => ({
      name: s.name,
      run: s.run,
      codeSha256: s.code?.sha256 ?? "",
      micromamba: s.micromamba ?? false,
    })),
    env: { ...(r.env ?? {}) },
    secretEnv: { ...(r.secretEnv ?? {}) },
    baseImageCreds: { ...(r.baseImageCreds ?? {}) },
    cpu: r.cpu ?? 0,
    memoryBytes: r.memoryBytes ?? 0,
    pushRepository: r.pushRepository ?? "",
    gpu: r.gpu ? { count: r.gpu.count, types: [...(r.gpu.types ?? [])] } : null,
  };
}

export function buildRequestFromProto(w: WireBuildImageRequest): BuildImageRequest {
  const r: BuildImageRequest = {
    steps: (w.steps ?? []).map((s) => ({
      name: s.name,
      run: s.run,
      ...(s.codeSha256 ? { code: { sha256: s.codeSha256 } } : {}),
      ...(s.micromamba ? { micromamba: true } : {}),
    })),
  };
  if (w.baseImage) r.baseImage = w.baseImage;
  if (w.baseCredentials)
    r.baseCredentials = { username: w.baseCredentials.username, password: w.baseCredentials.password };
  if (w.env && Object.keys(w.env).length > 0) r.env = { ...w.env };
  if (w.secretEnv && Object.keys(w.secretEnv).length > 0) r.secretEnv = { ...w.secretEnv };
  if (w.baseImageCreds && Object.keys(w.baseImageCreds).length > 0)
    r.baseImageCreds = { ...w.baseImageCreds };
  if (w.cpu > 0) r.cpu = w.cpu;
  if (w.memoryBytes > 0) r.memoryBytes = w.memoryBytes;
  if (w.pushRepository) r.pushRepository = w.pushRepository;
  if (w.gpu && w.gpu.count > 0) r.gpu = { count: w.gpu.count, types: [...(w.gpu.types ?? [])] };
  return r;
}

export function buildEventToProto(e: BuildEvent): WireBuildEvent {
  switch (e.type) {
    case "base":
      return { event: "base", base: { imageId: e.imageId, ref: e.ref, digest: e.digest } };
    case "step":
      return { event: "step", step: { index: e.index, total: e.total, name: e.name, cached: e.cached } };
    case "output": {
      const stream = e.stream === "stdout" ? "LOG_STREAM_STDOUT" : "LOG_STREAM_STDERR";
      return { event: "output", output: { index: e.index, stream, line: e.line } };
    }
    case "step_done":
      return {
        event: "stepDone",
        stepDone: { index: e.index, cached: e.cached, seconds: e.seconds, digest: e.digest },
      };
    case "done":
      return {
        event: "done",
        done: {
          imageId: e.imageId,
          ref: e.ref,
          digest: e.digest,
          cachedSteps: e.cachedSteps,
          builtSteps: e.builtSteps,
          pushedRef: e.pushedRef ?? "",
        },
      };
    case "pull": {
      const { type: _, ...pull } = e;
      return { event: "pull", pull };
    }
    case "push":
      return {
        event: "push",
        push: {
          ref: e.ref,
          blobsDone: e.blobsDone,
          blobsTotal: e.blobsTotal,
          bytesDone: e.bytesDone,
          bytesTotal: e.bytesTotal,
          blobsSkipped: e.blobsSkipped,
        },
      };
  }
}

export function buildEventFromProto(w: WireBuildEvent): BuildEvent {
  switch (w.event) {
    case "base":
      return { type: "base", ...w.base };
    case "step":
      return { type: "step", ...w.step };
    case "output":
      return {
        type: "output",
        index: w.output.index,
        stream: w.output.stream === "LOG_STREAM_STDERR" ? "stderr" : "stdout",
        line: w.output.line,
      };
    case "stepDone":
      return { type: "step_done", ...w.stepDone };
    case "done": {
      const { pushedRef, ...done } = w.done;
      return { type: "done", ...done, ...(pushedRef ? { pushedRef } : {}) };
    }
    case "push":
      return {
        type: "push",
        ...w.push,
        bytesDone: Number(w.push.bytesDone),
        bytesTotal: Number(w.push.bytesTotal),
      };
    case "pull":
      return {
        type: "pull",
        ...w.pull,
        bytesDone: Number(w.pull.bytesDone),
        bytesTotal: Number(w.pull.bytesTotal),
      };
    default:
      throw new BerthError(
        "internal",
        `the agent sent a build event of unknown kind ${(w as { event?: string }).event}`,
      );
  }
}
