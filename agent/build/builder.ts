// Image builds on this agent (docs/images.md, "Builds"): each step runs as a
// container of the agent's own runtime (runc, the same cgroups, egress and
// GPU injection as any container) on top of the previous step's image, and
// the container's writes are committed as one layer into the agent's image
// store. A step's layer is cached under a reference keyed by the parent's
// digest and the step (command and environment), so a rebuild runs only the
// steps from the first changed one on. A failed step's container and writes
// are removed; the layers of the steps before it stay, as cache.

import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { rm } from "node:fs/promises";
import { performance } from "node:perf_hooks";
import type {
  BuildEvent,
  BuildImageRequest,
  BuildStep,
  ContainerStatus,
  ImageBuildApi,
  GpuRequest,
  ImageSummary,
  LogEntry,
  RunContainerRequest,
} from "../../api/index.ts";
import { BerthError, describeError } from "../../shared/errors.ts";
import { Fanout } from "../../shared/fanout.ts";
import { type PullProgress, parseImageReference } from "../images/index.ts";
import {
  MICROMAMBA_PATH_LINE,
  MICROMAMBA_PROBE,
  micromambaArchive,
  micromambaMissing,
} from "./micromamba.ts";

/** What a build needs of the container host; ContainerHost has it. */
export interface BuildHost {
  pullImage(
    ref: string,
    opts?: { credentials?: { username: string; password: string }; onProgress?: (p: PullProgress) => void },
  ): Promise<ImageSummary>;
  listImages(): Promise<ImageSummary[]>;
  runContainer(req: RunContainerRequest): Promise<ContainerStatus>;
  streamLogs(id: string, opts?: { follow?: boolean }): AsyncIterable<LogEntry>;
  getContainer(id: string): Promise<ContainerStatus>;
  stopContainer(id: string, opts?: { graceMs?: number; remove?: boolean }): Promise<ContainerStatus>;
  commitFilesystem(containerId: string, ref: string): Promise<ImageSummary>;
  hasCode(sha256: string): Promise<boolean>;
  putCode(sha256: string, data: AsyncIterable<Uint8Array>): Promise<void>;
}

/** Repository of the step cache: one tag per (parent digest, step). */
export const BUILD_CACHE_REPO = "localhost/berth-build-cache";
/** Label on step containers: the image id they build. */
export const BUILD_LABEL = "berth.build";
/** Output lines a failure reports. */
export const FAILURE_TAIL_LINES = 20;

const GiB = 1024 * 1024 * 1024;
const STEP_NAME_MAX = 200;

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

/** The cache key of a step on top of `parentDigest`: what it runs and with which environment. */
export function stepCacheKey(
  parentDigest: string,
  step: BuildStep,
  env: Record<string, string>,
  secretNames: string[] = [],
  gpu?: GpuRequest,
): string {
  const sortedEnv = Object.keys(env)
    .sort()
    .map((k) => `${k}=${env[k]}`);
  const key: Record<string, unknown> = { parent: parentDigest, run: step.run, env: sortedEnv };
  if (step.code) key.code = step.code.sha256;
  if (secretNames.length > 0) key.secrets = [...secretNames].sort();
  if (step.micromamba) key.micromamba = true;
  if (gpu) key.gpu = gpuKey(gpu);
  return sha256(JSON.stringify(key)).slice(0, 48);
}

/** The image id: a hash of the build definition and the base digest. */
export function buildImageId(baseDigest: string, req: BuildImageRequest): string {
  const env = req.env ?? {};
  const sortedEnv = Object.keys(env)
    .sort()
    .map((k) => `${k}=${env[k]}`);
  const def: Record<string, unknown> = {
    base: baseDigest,
    steps: req.steps.map((s) =>
      s.code || s.micromamba
        ? {
            run: s.run,
            ...(s.code ? { code: s.code.sha256 } : {}),
            ...(s.micromamba ? { micromamba: true } : {}),
          }
        : s.run,
    ),
    env: sortedEnv,
  };
  const secretNames = Object.keys(req.secretEnv ?? {}).sort();
  if (secretNames.length > 0) def.secrets = secretNames;
  if (req.gpu) def.gpu = gpuKey(req.gpu);
  return `img-${sha256(JSON.stringify(def)).slice(0, 24)}`;
}

/** A build's GPU as part of its keys: a step built on a GPU is not the same step built without. */
const gpuKey = (g: GpuRequest) => ({ count: g.count, types: [...(g.types ?? [])] });

const invalid = (m: string) => new BerthError("invalid_request", m);

/** Refuses malformed requests before anything runs. */
export function checkBuildRequest(req: BuildImageRequest): void {
  if (!req || !Array.isArray(req.steps)) throw invalid("a build needs a list of steps");
  req.steps.forEach((s, i) => {
    if (!s || typeof s.run !== "string" || s.run.trim() === "") {
      throw invalid(`build step ${i + 1} has no command`);
    }
    if (s.micromamba && s.code)
      throw invalid(`build step ${i + 1} runs micromamba and cannot also mount a context`);
    if (typeof s.name !== "string" || s.name.length > STEP_NAME_MAX) {
      throw invalid(`build step ${i + 1} needs a name of at most ${STEP_NAME_MAX} characters`);
    }
  });
  for (const k of [...Object.keys(req.env ?? {}), ...Object.keys(req.secretEnv ?? {})]) {
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k))
      throw invalid(`build environment variable name ${JSON.stringify(k)} is not valid`);
  }
  if (req.cpu !== undefined && !(req.cpu > 0)) throw invalid("build cpu must be positive");
  if (req.memoryBytes !== undefined && !(req.memoryBytes > 0))
    throw invalid("build memoryBytes must be positive");
  if (req.gpu !== undefined && !(Number.isInteger(req.gpu.count) && req.gpu.count > 0))
    throw invalid("a build's gpu count must be a positive whole number");
}

function refOf(summary: ImageSummary, wanted: string): boolean {
  return summary.ref === wanted || summary.refs.includes(wanted) || summary.refs.includes(`${wanted}`);
}

export class ImageBuilder implements ImageBuildApi {
  /** Builds in progress by image id: a second request for one follows the first. */
  private readonly running = new Map<string, Fanout<BuildEvent>>();
  private seq = 0;
  /** Secret values of each running step container, for redact(). */
  private readonly secretsOf = new Map<string, string[]>();

  constructor(
    private readonly host: BuildHost,
    private readonly opts: {
      /** The agent's default image, for a build that names no base. @default pullImage("") (refused) */
      pullDefault?: (onProgress: (p: PullProgress) => void) => Promise<ImageSummary>;
      /** Pulls with base_image_creds' variables (every registry form the store knows). @default refused */
      pullWithCreds?: (
        ref: string,
        vars: Record<string, string>,
        onProgress: (p: PullProgress) => void,
      ) => Promise<ImageSummary>;
      /** The operator's micromamba binary (`--micromamba-bin`), for steps on images without one. */
      micromambaBin?: () => string | undefined;
    } = {},
  ) {}

  /** The micromamba binary's code archive on this host, made once. */
  private micromambaCode?: Promise<string>;

  /**
   * What a build's micromamba steps mount: the configured binary's code
   * archive, or nothing when the base has micromamba; with neither, refused
   * before any step runs.
   */
  private async micromambaFor(
    imageId: string,
    base: { ref: string },
    req: BuildImageRequest,
  ): Promise<string | undefined> {
    const bin = this.opts.micromambaBin?.();
    if (bin) {
      // Made once; made again if the code store no longer has it.
      const known = await this.micromambaCode?.catch(() => undefined);
      if (known && (await this.host.hasCode(known))) return known;
      this.micromambaCode = (async () => {
        const a = await micromambaArchive(bin);
        try {
          if (!(await this.host.hasCode(a.sha256)))
            await this.host.putCode(a.sha256, createReadStream(a.path));
          return a.sha256;
        } finally {
          await rm(a.dir, { recursive: true, force: true });
        }
      })().catch((e: unknown) => {
        this.micromambaCode = undefined;
        throw new BerthError(
          "failed_precondition",
          `the micromamba binary ${bin} could not be used: ${describeError(e)}`,
        );
      });
      return this.micromambaCode;
    }
    const id = `bld-${imageId.slice(4, 16)}-micromamba-${process.pid}-${++this.seq}`;
    const found = await this.inContainer(
      imageId,
      id,
      base.ref,
      MICROMAMBA_PROBE,
      req,
      {},
      async (s) => s.exitCode === 0,
    );
    if (!found) throw micromambaMissing(req.baseImage?.trim() || base.ref);
    return undefined;
  }

  async *buildImage(req: BuildImageRequest, opts: { signal?: AbortSignal } = {}): AsyncGenerator<BuildEvent> {
    checkBuildRequest(req);
    const baseRef = req.baseImage?.trim() || undefined;
    // The base's pull streams `pull` events while it runs (docs/images.md, "Pull progress").
    let pulled: ImageSummary | undefined;
    const pulling = new Fanout<BuildEvent>();
    void pulling.run(async (emit) => {
      pulled = await this.pullBase(baseRef, req, (p) => emit({ type: "pull", ...p }));
    });
    yield* pulling.follow(opts.signal);
    const base = pulled as ImageSummary | undefined;
    if (!base) return; // the caller stopped following
    const imageId = buildImageId(base.digest, req);
    let fanout = this.running.get(imageId);
    if (!fanout) {
      const f = new Fanout<BuildEvent>();
      fanout = f;
      this.running.set(imageId, f);
      f.run(async (emit) => {
        emit({ type: "base", imageId, ref: baseRef ?? base.ref, digest: base.digest });
        await this.steps(imageId, base, req, emit);
      }).finally(() => this.running.delete(imageId));
    }
    yield* fanout.follow(opts.signal);
  }

  private async steps(
    imageId: string,
    base: ImageSummary,
    req: BuildImageRequest,
    emit: (e: BuildEvent) => void,
  ): Promise<void> {
    const env = req.env ?? {};
    // The base by digest: cached now, so no step (and no container of the
    // image) asks its registry again, with or without credentials.
    let parent = { ref: pinnedRef(base), digest: base.digest };
    let cachedSteps = 0;
    let builtSteps = 0;
    const total = req.steps.length;
    const micromamba = req.steps.some((s) => s.micromamba)
      ? await this.micromambaFor(imageId, parent, req)
      : undefined;
    for (const [i, given] of req.steps.entries()) {
      const index = i + 1;
      // The configured micromamba's archive is mounted like a build context (and keys the step's cache).
      const step = given.micromamba && micromamba ? { ...given, code: { sha256: micromamba } } : given;
      const cacheRef = `${BUILD_CACHE_REPO}:${stepCacheKey(parent.digest, step, env, Object.keys(req.secretEnv ?? {}), req.gpu)}`;
      const hit = (await this.host.listImages()).find((s) => refOf(s, cacheRef));
      const started = performance.now();
      emit({ type: "step", index, total, name: step.name, cached: !!hit });
      let digest: string;
      if (hit) {
        digest = hit.digest;
        cachedSteps++;
      } else {
        digest = (await this.runStep(imageId, index, step, parent.ref, cacheRef, req, emit)).digest;
        builtSteps++;
      }
      const seconds = Math.round((performance.now() - started) / 10) / 100;
      emit({ type: "step_done", index, cached: !!hit, seconds, digest });
      parent = { ref: cacheRef, digest };
    }
    emit({ type: "done", imageId, ref: parent.ref, digest: parent.digest, cachedSteps, builtSteps });
  }

  private async pullBase(
    baseRef: string | undefined,
    req: BuildImageRequest,
    onProgress: (p: PullProgress) => void,
  ): Promise<ImageSummary> {
    if (req.baseImageCreds && Object.keys(req.baseImageCreds).length > 0) {
      if (req.baseCredentials) throw invalid("give baseCredentials or baseImageCreds, not both");
      if (!baseRef) throw invalid("base_image_creds need a base_image to use them for");
      if (!this.opts.pullWithCreds) throw invalid("this agent cannot resolve base_image_creds");
      return this.opts.pullWithCreds(baseRef, req.baseImageCreds, onProgress);
    }
    if (baseRef === undefined && this.opts.pullDefault) return this.opts.pullDefault(onProgress);
    return this.host.pullImage(baseRef ?? "", {
      ...(req.baseCredentials ? { credentials: req.baseCredentials } : {}),
      onProgress,
    });
  }

  /** Runs one step in a container on `parentRef` and commits its writes under `cacheRef`. */
  private async runStep(
    imageId: string,
    index: number,
    step: BuildStep,
    parentRef: string,
    cacheRef: string,
    req: BuildImageRequest,
    emit: (e: BuildEvent) => void,
  ): Promise<ImageSummary> {
    const id = `bld-${imageId.slice(4, 16)}-${index}-${process.pid}-${++this.seq}`;
    // A micromamba step with the configured binary (its archive is step.code) finds it on PATH.
    const run = step.micromamba && step.code ? `${MICROMAMBA_PATH_LINE}\n${step.run}` : step.run;
    const onLine = (stream: "stdout" | "stderr", line: string) =>
      emit({ type: "output", index, stream, line });
    return this.inContainer(
      imageId,
      id,
      parentRef,
      run,
      req,
      { code: step.code, onLine },
      async (status, tail) => {
        if (status.exitCode !== 0) {
          const code = status.exitCode ?? -1;
          const why = status.reason && status.reason !== "exited" ? ` (${status.reason})` : "";
          throw new BerthError(
            "image_build_failed",
            `build step ${index}/${req.steps.length} (${step.name}) exited with code ${code}${why}; last output:\n${tail.join("\n")}`,
            { step: index, name: step.name, exitCode: code, output: tail },
          );
        }
        return this.host.commitFilesystem(id, cacheRef);
      },
    );
  }

  /**
   * Runs `/bin/sh -c command` in a build container on `image` (the build's
   * environment, secrets, resources, GPUs and label), follows its output to
   * the end, calls `then` with its final status and last output lines, and
   * removes it.
   */
  private async inContainer<T>(
    imageId: string,
    id: string,
    image: string,
    command: string,
    req: BuildImageRequest,
    o: { code?: { sha256: string }; onLine?: (stream: "stdout" | "stderr", line: string) => void },
    then: (status: ContainerStatus, tail: string[]) => Promise<T>,
  ): Promise<T> {
    const tail: string[] = [];
    let c: ContainerStatus | undefined;
    const secrets = Object.values(req.secretEnv ?? {})
      .filter((v) => v.length > 0)
      .sort((a, b) => b.length - a.length);
    // Set before the container starts, so the host's own log lines are redacted from the first.
    if (secrets.length > 0) this.secretsOf.set(id, secrets);
    try {
      c = await this.host.runContainer({
        id,
        image,
        args: ["/bin/sh", "-c", command],
        env: { ...(req.env ?? {}), ...(req.secretEnv ?? {}) },
        cwd: "/",
        cpu: req.cpu ?? 1,
        memoryBytes: req.memoryBytes ?? GiB,
        labels: { [BUILD_LABEL]: imageId },
        ...(o.code ? { code: { sha256: o.code.sha256 } } : {}),
        // build_with_gpu: the same GPU request, and so the same injection, as any container.
        ...(req.gpu ? { gpu: { count: req.gpu.count, types: [...(req.gpu.types ?? [])] } } : {}),
      });
      // Follows until the container ends.
      for await (const l of this.host.streamLogs(id, { follow: true })) {
        const line = this.redact(id, l.line);
        tail.push(line);
        if (tail.length > FAILURE_TAIL_LINES) tail.shift();
        o.onLine?.(l.stream, line);
      }
      return await then(await this.exited(id), tail);
    } finally {
      if (c) {
        await this.host.stopContainer(id, { graceMs: 0, remove: true }).catch((e: unknown) => {
          console.error(`build ${imageId}: removing step container ${id} failed: ${describeError(e)}`);
        });
      }
      this.secretsOf.delete(id);
    }
  }

  /**
   * A line of a build step's output with its secrets as `***`. The host
   * passes every line of its containers through this before shipping it, so
   * no log of a step holds a secret's value.
   */
  redact(containerId: string, line: string): string {
    const secrets = this.secretsOf.get(containerId);
    if (!secrets) return line;
    let out = line;
    for (const v of secrets) out = out.split(v).join("***");
    return out;
  }

  /** The container's final status (the log stream can end a moment before the state says so). */
  private async exited(id: string): Promise<ContainerStatus> {
    for (let i = 0; ; i++) {
      const s = await this.host.getContainer(id);
      if (s.state === "stopped") return s;
      if (i > 600)
        throw new BerthError("internal", `build step container ${id} did not stop after its output ended`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/** `registry/repository@digest` of a pulled image: a pull of it is answered from the cache. */
export function pinnedRef(image: ImageSummary): string {
  const r = parseImageReference(image.ref);
  return `${r.registry}/${r.repository}@${image.digest}`;
}
