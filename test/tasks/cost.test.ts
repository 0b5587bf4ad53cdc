// The task cost estimate (coordinator/tasks/cost.ts): duration x per-second
// rates of the requested CPU, memory and GPU; rates validated at start-up.

import assert from "node:assert/strict";
import { describe, test } from "node:test";
import {
  estimateTaskCost,
  gpuRate,
  requestedResources,
  resolveCostRates,
  ZERO_COST_RATES,
} from "../../coordinator/tasks/cost.ts";
import { resolveCoordinatorOptions } from "../../coordinator/options.ts";
import { BerthError } from "../../shared/errors.ts";
import { stubConfig, stubExtra } from "./fixtures.ts";

const rates = resolveCostRates({
  cpuCorePerSecond: 0.001,
  memoryGibPerSecond: 0.0002,
  gpuPerSecond: { default: 0.01, "A100-80": 0.03 },
  currency: "USD",
});

describe("task cost", () => {
  test("duration x (cores x cpu rate + GiB x memory rate + GPUs x GPU rate)", () => {
    // 2.5 cores, 2048 MiB, 2 x A100-80, 100 s.
    const req = requestedResources({
      config: stubConfig({ runtime: { cpu: 2, gpu: "A100-80", memory: 2048, image_id: "" } }),
      extra: stubExtra({ cpu_millicores: 2500, gpu_types: ["A100-80"], gpu_count: 2 }),
    });
    assert.deepEqual(req, { cpuCores: 2.5, memoryGib: 2, gpuTypes: ["A100-80"], gpuCount: 2 });
    const c = estimateTaskCost(
      { startedAt: "2025-01-01T00:00:00.000Z", endedAt: "2025-01-01T00:01:40.000Z" },
      req,
      rates,
    );
    assert.deepEqual(c, {
      estimate: 6.29,
      currency: "USD",
      cpu: 0.25,
      memory: 0.04,
      gpu: 6,
      duration_seconds: 100,
      gpu_seconds: 200,
      final: true,
      rates: { cpu_core_per_second: 0.001, memory_gib_per_second: 0.0002, gpu_per_second: 0.03 },
    });
  });

  test("null before the task starts; a running task runs to now and is not final", () => {
    const req = { cpuCores: 1, memoryGib: 0, gpuTypes: [], gpuCount: 0 };
    assert.equal(estimateTaskCost({ startedAt: null, endedAt: null }, req, rates), null);
    const now = Date.parse("2025-01-01T00:00:10.000Z");
    const c = estimateTaskCost({ startedAt: "2025-01-01T00:00:00.000Z", endedAt: null }, req, rates, now);
    assert.equal(c?.final, false);
    assert.equal(c?.duration_seconds, 10);
    assert.equal(c?.estimate, 0.01);
    assert.equal(c?.gpu, 0);
  });

  test("GPU rate: the first requested type with a rate of its own, case-insensitive, else default", () => {
    assert.equal(gpuRate(rates, ["T4", "a100-80"]), 0.03);
    assert.equal(gpuRate(rates, ["T4"]), 0.01);
    assert.equal(gpuRate(rates, []), 0.01);
    // The spec's runtime.gpu string when extra names no types; a GPU set with count 0 means one.
    const req = requestedResources({
      config: stubConfig({ runtime: { cpu: 1, gpu: "T4,A100-80", memory: 128, image_id: "" } }),
      extra: stubExtra({ cpu_millicores: 0 }),
    });
    assert.deepEqual(req, { cpuCores: 1, memoryGib: 0.125, gpuTypes: ["T4", "A100-80"], gpuCount: 1 });
  });

  test("unconfigured rates are 0: the cost is 0, never a guess", () => {
    assert.deepEqual(resolveCostRates(undefined), {
      cpuCorePerSecond: 0,
      memoryGibPerSecond: 0,
      gpuPerSecond: { default: 0 },
    });
    const c = estimateTaskCost(
      { startedAt: "2025-01-01T00:00:00Z", endedAt: "2025-01-01T01:00:00Z" },
      { cpuCores: 8, memoryGib: 64, gpuTypes: ["H100"], gpuCount: 8 },
      ZERO_COST_RATES,
    );
    assert.equal(c?.estimate, 0);
    assert.equal(c?.duration_seconds, 3600);
    assert.equal("currency" in (c ?? {}), false);
  });

  test("bad rates are refused at start-up, naming the field", () => {
    const bad = (o: unknown, re: RegExp) =>
      assert.throws(
        () => resolveCostRates(o as never),
        (e: unknown) => e instanceof BerthError && e.code === "invalid_request" && re.test(e.message),
      );
    bad({ cpuCorePerSecond: -1 }, /costRates\.cpuCorePerSecond must be a number >= 0, got -1/);
    bad({ memoryGibPerSecond: "0.1" }, /costRates\.memoryGibPerSecond must be a number >= 0, got "0\.1"/);
    bad({ gpuPerSecond: { H100: Number.NaN } }, /costRates\.gpuPerSecond\.H100/);
    bad({ gpuPerSecond: [1] }, /gpuPerSecond must be an object/);
    bad({ currency: "" }, /currency must be a non-empty string/);
    bad("cheap", /costRates must be an object/);
  });

  test("the coordinator options carry the resolved rates", () => {
    const base = { nats: { url: "nats://127.0.0.1:4222" }, agentNats: { password: "pw" } };
    assert.deepEqual(resolveCoordinatorOptions(base).costRates, ZERO_COST_RATES);
    const o = resolveCoordinatorOptions({ ...base, costRates: { gpuPerSecond: { default: 0.5 } } });
    assert.deepEqual(o.costRates.gpuPerSecond, { default: 0.5 });
    assert.throws(
      () => resolveCoordinatorOptions({ ...base, costRates: { cpuCorePerSecond: -2 } }),
      /cpuCorePerSecond/,
    );
  });
});
