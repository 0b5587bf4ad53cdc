// The SDK's Image spec as the agent's build steps: commands in order, then
// ensure-pip and one pip install against the cluster's index; what builds do
// not do is refused by name.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { test } from "node:test";
import { buildRequestOf, ENSURE_PIP_STEP, needsBuild, shellQuote } from "../../coordinator/images/index.ts";

test("commands in order, then ensure pip and one pip install with the cluster's index", () => {
  const req = buildRequestOf(
    {
      commands: ["apt-get update", "apt-get install -y ffmpeg"],
      python_packages: ["numpy==2.0", "it's-odd"],
      env_vars: ["HF_HOME=/cache", "EMPTY="],
      base_image: "registry.example:5000/cuda:12.4",
    },
    {
      indexUrl: "http://mirror.local/simple/",
      extraIndexUrls: ["http://extra.local/simple/"],
      trustedHosts: ["mirror.local"],
    },
  );
  assert.equal(req.baseImage, "registry.example:5000/cuda:12.4");
  assert.deepEqual(req.env, { HF_HOME: "/cache", EMPTY: "" });
  assert.deepEqual(
    req.steps.map((s) => s.name),
    ["apt-get update", "apt-get install -y ffmpeg", "ensure pip", "pip install numpy==2.0 it's-odd"],
  );
  assert.deepEqual(req.steps[2], ENSURE_PIP_STEP);
  const pip = req.steps[3]?.run ?? "";
  for (const part of [
    "'--index-url' 'http://mirror.local/simple/'",
    "'--extra-index-url' 'http://extra.local/simple/'",
    "'--trusted-host' 'mirror.local'",
    "'numpy==2.0' 'it'\\''s-odd'",
  ]) {
    assert.ok(pip.includes(part), `${part} in ${pip}`);
  }
  assert.match(pip, /^PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install /);
  // The shell sees each package as one word, quotes and all.
  const words = execFileSync("sh", [
    "-c",
    `printf '%s\\n' ${shellQuote("it's-odd")} ${shellQuote("a b")}`,
  ]).toString();
  assert.equal(words, "it's-odd\na b\n");
});

test("no packages: no pip steps; no base: the agent's default", () => {
  const req = buildRequestOf({ commands: ["echo hi"] }, {});
  assert.deepEqual(req.steps, [{ name: "echo hi", run: "echo hi" }]);
  assert.equal(req.baseImage, undefined);
  assert.equal(needsBuild({ commands: [] }), false);
  assert.equal(needsBuild({ env_vars: ["A=1"] }), true);
});

test("what builds do not do is refused by name; bad input names the cause", () => {
  const refused = (spec: Parameters<typeof buildRequestOf>[0], word: RegExp) =>
    assert.throws(
      () => buildRequestOf(spec, {}),
      (e: Error & { code?: string }) => {
        assert.equal(e.code, "failed_precondition");
        assert.match(e.message, word);
        return true;
      },
    );
  assert.doesNotThrow(
    () => buildRequestOf({ commands: ["x"], secrets: ["HF_TOKEN"] }, {}),
    "secrets are built",
  );
  assert.throws(
    () => buildRequestOf({ dockerfile: { path: "/Dockerfile" } }, {}),
    /needs the Dockerfile's text/,
  );
  refused({ snapshot_id: "snap-1", commands: ["x"] }, /snapshot/);
  assert.throws(() => buildRequestOf({ build_with_gpu: "A10G; rm" }, {}), /is not a GPU type/);
  assert.doesNotThrow(() =>
    buildRequestOf({ base_image: "r.example/x:1", base_image_creds: ["REGISTRY_USERNAME"] }, {}),
  );
  assert.throws(() => buildRequestOf({ commands: [" "] }, {}), /command is empty/);
  assert.throws(() => buildRequestOf({ env_vars: ["=x"] }, {}), /not KEY=VALUE/);
});

test("micromamba: one install of python and the packages into /opt/conda from the image's then the cluster's channels", () => {
  const req = buildRequestOf(
    {
      python_version: "python3.11",
      commands: ["echo first"],
      micromamba: true,
      micromamba_packages: ["numpy", "it's"],
      micromamba_channels: ["https://conda.image.local/main"],
      python_packages: ["requests"],
    },
    { condaChannels: ["https://conda.mirror.local/forge", "https://conda.image.local/main"] },
  );
  assert.deepEqual(
    req.steps.map((s) => s.name),
    ["echo first", "micromamba install python=3.11 numpy it's", "ensure pip", "pip install requests"],
  );
  const step = req.steps[1]!;
  assert.equal(step.micromamba, true, "the agent puts its micromamba beside this step");
  assert.equal(
    step.run,
    `micromamba 'install' '--yes' '--root-prefix' '/opt/conda' '--prefix' '/opt/conda' '--override-channels' '-c' 'https://conda.image.local/main' '-c' 'https://conda.mirror.local/forge' 'python=3.11' 'numpy' ${shellQuote("it's")} && micromamba clean --all --yes --root-prefix /opt/conda`,
  );
  assert.match(
    req.env?.PATH ?? "",
    /^\/opt\/conda\/bin:/,
    "the environment's python leads PATH at build and run",
  );
  assert.ok(needsBuild({ micromamba: true }));
  assert.equal(buildRequestOf({ micromamba: true }, {}).steps[0]?.run.includes("--override-channels"), false);
});

test("build_with_gpu: the request carries one GPU of that type", () => {
  assert.deepEqual(buildRequestOf({ build_with_gpu: "A10G" }, {}).gpu, { count: 1, types: ["A10G"] });
  assert.ok(needsBuild({ build_with_gpu: "A10G" }));
  assert.equal(buildRequestOf({ commands: ["x"] }, {}).gpu, undefined);
});
