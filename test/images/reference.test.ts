import assert from "node:assert/strict";
import { test } from "node:test";
import { CommandFailedError, redact, registryError } from "../../agent/images/commands.ts";
import { platformManifestDigest, sha256Digest } from "../../agent/images/oci-layout.ts";
import { isLoopbackRegistry, parseImageReference } from "../../agent/images/reference.ts";
import { BerthError } from "../../shared/errors.ts";

const D = `sha256:${"ab".repeat(32)}`;

test("references normalise like Docker's", () => {
  const cases: Array<[string, string, string, string]> = [
    ["python", "docker.io", "library/python", "docker.io/library/python:latest"],
    ["python:3.11", "docker.io", "library/python", "docker.io/library/python:3.11"],
    ["nvidia/cuda:12.1", "docker.io", "nvidia/cuda", "docker.io/nvidia/cuda:12.1"],
    ["index.docker.io/library/ubuntu:22.04", "docker.io", "library/ubuntu", "docker.io/library/ubuntu:22.04"],
    [
      "127.0.0.1:5000/berth/python:bookworm",
      "127.0.0.1:5000",
      "berth/python",
      "127.0.0.1:5000/berth/python:bookworm",
    ],
    ["localhost/a", "localhost", "a", "localhost/a:latest"],
    ["nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io", "nvidia/pytorch", "nvcr.io/nvidia/pytorch:24.01-py3"],
    [`ghcr.io/o/i@${D}`, "ghcr.io", "o/i", `ghcr.io/o/i@${D}`],
    [`ghcr.io/o/i:v1@${D}`, "ghcr.io", "o/i", `ghcr.io/o/i:v1@${D}`],
  ];
  for (const [input, registry, repository, canonical] of cases) {
    const r = parseImageReference(input);
    assert.deepEqual([r.registry, r.repository, r.canonical], [registry, repository, canonical], input);
  }
  assert.equal(parseImageReference(`a/b@${D}`).tag, undefined);
});

test("malformed references are refused with the reference named", () => {
  for (const bad of ["", "UPPER/case", "a b", "https://x/y", "x@sha256:nothex", "a:b:c/d", "img:bad tag"]) {
    assert.throws(
      () => parseImageReference(bad),
      (e: unknown) => e instanceof BerthError && e.code === "invalid_request",
      bad,
    );
  }
});

test("loopback registries", () => {
  assert.ok(isLoopbackRegistry("127.0.0.1:5000"));
  assert.ok(isLoopbackRegistry("localhost:5000"));
  assert.ok(isLoopbackRegistry("[::1]:5000"));
  assert.ok(!isLoopbackRegistry("registry.example:5000"));
  assert.ok(!isLoopbackRegistry("10.0.0.1:5000"));
});

test("platform manifest: single manifests hash to themselves, lists pick the platform", () => {
  const single = JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.manifest.v1+json",
  });
  assert.equal(platformManifestDigest(single, { os: "linux", architecture: "amd64" }), sha256Digest(single));
  const arm = `sha256:${"01".repeat(32)}`;
  const amd = `sha256:${"02".repeat(32)}`;
  const armv7 = `sha256:${"03".repeat(32)}`;
  const list = JSON.stringify({
    schemaVersion: 2,
    mediaType: "application/vnd.docker.distribution.manifest.list.v2+json",
    manifests: [
      { digest: arm, size: 1, mediaType: "m", platform: { os: "linux", architecture: "arm64" } },
      {
        digest: armv7,
        size: 1,
        mediaType: "m",
        platform: { os: "linux", architecture: "arm", variant: "v7" },
      },
      { digest: amd, size: 1, mediaType: "m", platform: { os: "linux", architecture: "amd64" } },
    ],
  });
  assert.equal(platformManifestDigest(list, { os: "linux", architecture: "amd64" }), amd);
  assert.equal(platformManifestDigest(list, { os: "linux", architecture: "arm64" }), arm);
  assert.equal(platformManifestDigest(list, { os: "linux", architecture: "arm", variant: "v7" }), armv7);
  assert.equal(platformManifestDigest(list, { os: "linux", architecture: "s390x" }), undefined);
});

test("registry errors: kinds from skopeo's answer, credentials redacted", () => {
  const fail = (stderr: string) => new CommandFailedError("skopeo", 1, stderr, "exit");
  const what = { ref: "r.example/a:b", registry: "r.example", tool: "skopeo", secrets: ["hunter22"] };
  const cases: Array<[string, string]> = [
    [
      'time="x" level=fatal msg="reading manifest b in r.example/a: manifest unknown: manifest unknown"',
      "not_found",
    ],
    ['level=fatal msg="initializing source: unauthorized: authentication required"', "registry_auth_failed"],
    [
      'level=fatal msg="pinging container registry r.example: dial tcp: connect: connection refused"',
      "unavailable",
    ],
    ['level=fatal msg="Get https://x/v2/: http: server gave HTTP response to HTTPS client"', "unavailable"],
  ];
  for (const [stderr, code] of cases) {
    const e = registryError(fail(stderr), what);
    assert.equal(e.code, code, stderr);
    assert.ok(e.message.includes("r.example/a:b"), e.message);
  }
  const leaked = registryError(fail('level=fatal msg="bad password hunter22 for user"'), what);
  assert.ok(!leaked.message.includes("hunter22"));
  assert.equal(redact("Authorization: Basic dXNlcjpwYXNz", []), "Authorization: Basic ***");
  assert.equal(redact("https://u:p4ss@host/x", []), "https://***@host/x");
});
