import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  gpuTypeFromModel,
  migProfileMemoryMiB,
  parseCudaVersion,
  parseListMig,
  parseQueryGpuCsv,
  schedulableDevices,
} from "../../agent/capacity/nvidia.ts";
import { isBerthError } from "../../shared/errors.ts";
import { FIXTURES } from "./fake-nvidia.ts";

const fixture = (name: string, file: string) => readFileSync(join(FIXTURES, name, file), "utf8");

describe("gpuTypeFromModel", () => {
  const table: [string, string][] = [
    ["NVIDIA H100 80GB HBM3", "H100"],
    ["NVIDIA H100 PCIe", "H100"],
    ["NVIDIA H100 NVL", "H100"],
    ["NVIDIA H200", "H200"],
    ["NVIDIA GH200 480GB", "GH200"],
    ["NVIDIA B200", "B200"],
    ["NVIDIA A100-SXM4-40GB", "A100"],
    ["NVIDIA A100-SXM4-80GB", "A100"],
    ["NVIDIA A100 80GB PCIe", "A100"],
    ["NVIDIA A100-PCIE-40GB", "A100"],
    ["NVIDIA A10G", "A10G"],
    ["NVIDIA A10", "A10"],
    ["NVIDIA L4", "L4"],
    ["NVIDIA L40S", "L40S"],
    ["Tesla T4", "T4"],
    ["Tesla V100-SXM2-16GB", "V100"],
    ["Tesla V100S-PCIE-32GB", "V100S"],
    ["NVIDIA GeForce RTX 4090", "4090"],
    ["NVIDIA GeForce RTX 3090", "3090"],
    ["NVIDIA GeForce RTX 3090 Ti", "3090-TI"],
    ["NVIDIA RTX A6000", "A6000"],
    ["NVIDIA RTX 6000 Ada Generation", "6000-ADA"],
    ["Quadro RTX 8000", "8000"],
    ["NVIDIA TITAN RTX", "TITAN"],
  ];
  for (const [model, type] of table) {
    it(`${model} → ${type}`, () => assert.equal(gpuTypeFromModel(model), type));
  }

  it("an operator override wins over the rule", () => {
    assert.equal(
      gpuTypeFromModel("NVIDIA A100 80GB PCIe", { "NVIDIA A100 80GB PCIe": "A100-80GB" }),
      "A100-80GB",
    );
    assert.equal(gpuTypeFromModel("NVIDIA A100-SXM4-40GB", { "NVIDIA A100 80GB PCIe": "A100-80GB" }), "A100");
  });
});

describe("migProfileMemoryMiB", () => {
  it("reads the nominal size from the profile name", () => {
    assert.equal(migProfileMemoryMiB("1g.5gb"), 5120);
    assert.equal(migProfileMemoryMiB("1g.10gb"), 10240);
    assert.equal(migProfileMemoryMiB("3g.40gb"), 40960);
    assert.equal(migProfileMemoryMiB("7g.80gb"), 81920);
    assert.equal(migProfileMemoryMiB("1g.10gb+me"), 10240);
  });
  it("rejects a name that is not a profile", () => {
    assert.throws(() => migProfileMemoryMiB("big"), /unrecognised MIG profile "big"/);
  });
});

describe("parseQueryGpuCsv", () => {
  it("reads the 8×H100 recording", () => {
    const gpus = parseQueryGpuCsv(fixture("h100x8", "query.csv"));
    assert.equal(gpus.length, 8);
    assert.deepEqual(gpus[0], {
      index: 0,
      uuid: "GPU-566bf9d7-c55a-45f8-91a6-e55e9b9b1325",
      name: "NVIDIA H100 80GB HBM3",
      memoryMiB: 81559,
      driverVersion: "535.129.03",
      pciBusId: "00000000:18:00.0",
      migEnabled: false,
    });
    assert.deepEqual(
      gpus.map((g) => g.index),
      [0, 1, 2, 3, 4, 5, 6, 7],
    );
  });

  it("reads the real H200 capture (driver 580)", () => {
    assert.deepEqual(parseQueryGpuCsv(fixture("h200-driver580", "query.csv")), [
      {
        index: 0,
        uuid: "GPU-be599b92-0f41-e687-3b5b-ed854ce46672",
        name: "NVIDIA H200",
        memoryMiB: 143771,
        driverVersion: "580.159.04",
        pciBusId: "00000000:00:06.0",
        migEnabled: false,
      },
    ]);
    assert.equal(parseCudaVersion(fixture("h200-driver580", "smi.txt")), "13.0");
    assert.equal(gpuTypeFromModel("NVIDIA H200"), "H200");
    assert.deepEqual(parseListMig(fixture("h200-driver580", "list.txt")), [], "no MIG instances listed");
  });

  it("reads MIG mode per GPU and [N/A] as disabled", () => {
    assert.deepEqual(
      parseQueryGpuCsv(fixture("a100-mig", "query.csv")).map((g) => g.migEnabled),
      [true, false],
    );
    assert.equal(parseQueryGpuCsv(fixture("a10g", "query.csv"))[0]?.migEnabled, false);
  });

  it("accepts the six-column form of drivers without MIG", () => {
    const line =
      "0, GPU-11111111-2222-3333-4444-555555555555, Tesla T4, 15360, 470.82.01, 00000000:00:04.0\n";
    assert.equal(parseQueryGpuCsv(line)[0]?.migEnabled, false);
  });

  it("names the line and field of bad input", () => {
    const bad = (text: string, re: RegExp) =>
      assert.throws(
        () => parseQueryGpuCsv(text),
        (e) => isBerthError(e) && e.code === "invalid_request" && re.test(e.message),
      );
    bad("0, GPU-x, NVIDIA L4\n", /line 1 has 3 columns/);
    bad("x, GPU-a, NVIDIA L4, 23034, 550.54.14, 00000000:00:03.0\n", /index "x"/);
    bad("0, GPU-a, NVIDIA L4, [N/A], 550.54.14, 00000000:00:03.0\n", /memory.total "\[N\/A\]"/);
    bad("0, 1234, NVIDIA L4, 23034, 550.54.14, 00000000:00:03.0\n", /uuid "1234"/);
  });
});

describe("parseListMig and schedulableDevices", () => {
  it("offers MIG instances instead of their parent, and whole GPUs without MIG", () => {
    const gpus = parseQueryGpuCsv(fixture("a100-mig", "query.csv"));
    const migs = parseListMig(fixture("a100-mig", "list.txt"));
    assert.equal(migs.length, 4);
    const devices = schedulableDevices(gpus, migs);
    const parent = "GPU-af5d8bb0-9f2e-4ea4-b658-90e0f94855d0";
    assert.ok(!devices.some((d) => d.uuid === parent), "the MIG-enabled parent is not offered whole");
    assert.deepEqual(
      devices.map((d) => [d.index, d.type, d.memoryMiB, d.mig?.profile ?? null]),
      [
        [0, "A100", 20480, "3g.20gb"],
        [0, "A100", 10240, "2g.10gb"],
        [0, "A100", 5120, "1g.5gb"],
        [0, "A100", 5120, "1g.5gb"],
        [1, "A100", 40960, null],
      ],
    );
    assert.deepEqual(devices[1], {
      index: 0,
      uuid: "MIG-0e46c215-b5fa-4b0c-9b18-bd763f20134c",
      model: "NVIDIA A100-SXM4-40GB",
      type: "A100",
      memoryMiB: 10240,
      mig: { profile: "2g.10gb", parentUuid: parent },
    });
  });

  it("reads the MIG lines of R450–R465 drivers", () => {
    const text =
      "GPU 0: A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n" +
      "  MIG 1g.5gb Device 0: (UUID: MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0)\n";
    assert.deepEqual(parseListMig(text), [
      {
        parentUuid: "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
        deviceIndex: 0,
        profile: "1g.5gb",
        uuid: "MIG-GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77/7/0",
      },
    ]);
  });

  it("a GPU with MIG enabled and no instances offers nothing", () => {
    const gpus = parseQueryGpuCsv(fixture("a100-mig-empty", "query.csv"));
    assert.deepEqual(schedulableDevices(gpus, parseListMig(fixture("a100-mig-empty", "list.txt"))), []);
  });

  it("lists no MIG devices for hosts without MIG", () => {
    for (const f of ["h100x8", "a10g", "rtx4090x2", "v100x2-r418"])
      assert.deepEqual(parseListMig(fixture(f, "list.txt")), []);
  });
});

describe("parseCudaVersion", () => {
  it("reads the header of every recording", () => {
    assert.equal(parseCudaVersion(fixture("h100x8", "smi.txt")), "12.2");
    assert.equal(parseCudaVersion(fixture("a10g", "smi.txt")), "12.2");
    assert.equal(parseCudaVersion(fixture("rtx4090x2", "smi.txt")), "12.4");
    assert.equal(parseCudaVersion(fixture("a100-mig", "smi.txt")), "12.2");
    assert.equal(parseCudaVersion(fixture("v100x2-r418", "smi.txt")), "10.1");
  });
  it("reads nvidia-smi --version and gives undefined when absent", () => {
    assert.equal(parseCudaVersion("NVIDIA-SMI version  : 550.54.14\nCUDA Version        : 12.4\n"), "12.4");
    assert.equal(parseCudaVersion("no header here"), undefined);
  });
});
