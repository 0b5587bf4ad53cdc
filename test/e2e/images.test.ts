// Image builds end to end on a `berth up` cluster, through the real SDK: a
// function whose image apt-installs python3-numpy returns a numpy result; a
// rebuild reports every step cached and a changed last step reruns only
// that step; python_packages and a requirements file install from a package
// index the test builds from a wheel it makes (served in a namespace the
// test made, the cluster's only index: `berth up --pip-index-url`); a
// failing step raises ImageBuildError with the step, its exit code and its
// output, and no image is ready for it; the REST list shows each status.

import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { startTestRegistry } from "../helpers/registry.ts";
import { pushTestImage } from "../helpers/test-image.ts";
import { waitUntil } from "../helpers/wait.ts";
import { Teardown, createOutside } from "../network/helpers.ts";

const INDEX_PORT = 8765;
const indexHost = (octet: number) => `10.214.${octet}.2`;

// The wheel, written with the standard library (a wheel is a zip with a
// dist-info), and a PEP 503 simple index that links to it.
const MAKE_INDEX = `
import base64, hashlib, os, sys, zipfile
root = sys.argv[1]
files = {
    "berthdemo/__init__.py": "def hello():\\n    return 'hello from berthdemo 1.0'\\n",
    "berthdemo-1.0.dist-info/METADATA": "Metadata-Version: 2.1\\nName: berthdemo\\nVersion: 1.0\\n",
    "berthdemo-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: berth-test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
}
def digest(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
record = "".join(f"{n},{digest(c.encode())},{len(c.encode())}\\n" for n, c in files.items())
record += "berthdemo-1.0.dist-info/RECORD,,\\n"
os.makedirs(os.path.join(root, "files"), exist_ok=True)
os.makedirs(os.path.join(root, "simple", "berthdemo"), exist_ok=True)
wheel = os.path.join(root, "files", "berthdemo-1.0-py3-none-any.whl")
with zipfile.ZipFile(wheel, "w") as z:
    for n, c in files.items():
        z.writestr(n, c)
    z.writestr("berthdemo-1.0.dist-info/RECORD", record)
with open(os.path.join(root, "simple", "index.html"), "w") as f:
    f.write('<html><body><a href="berthdemo/">berthdemo</a></body></html>')
with open(os.path.join(root, "simple", "berthdemo", "index.html"), "w") as f:
    f.write('<html><body><a href="../../files/berthdemo-1.0-py3-none-any.whl">berthdemo-1.0-py3-none-any.whl</a></body></html>')
`;

const APP = `
import os, sys
from berth import Image, function
from berth.errors import ImageBuildError

NUMPY = ["apt-get update -qq", "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-numpy"]
last = os.environ.get("LAST_STEP", "echo first-variant > /variant")
numpy_image = Image().add_commands(NUMPY + [last])

# A variant gets a stub of its own: a warm container of the first stub's older config could take its task.
@function(name=os.environ.get("FN_NAME", "np_sum"), image=numpy_image, cpu=0.5, memory=256)
def np_sum(n):
    import numpy
    return int(numpy.arange(n).sum()), open("/variant").read().strip()

@function(image=Image(python_packages=["berthdemo"]), cpu=0.5, memory=128)
def demo():
    import berthdemo
    return berthdemo.hello()

@function(image=Image().add_python_packages("requirements.txt"), cpu=0.5, memory=128)
def demo_req():
    import berthdemo
    return "req: " + berthdemo.hello()

@function(image=Image().add_commands(["echo before-the-failure", "echo bad-output; echo on-stderr >&2; exit 3"]), cpu=0.5, memory=128)
def broken():
    return "never"

@function(image=Image().add_commands(['echo "$STAGE" > /stage-at-build']).with_envs({"STAGE": "staged"}), cpu=0.5, memory=128)
def env_check():
    return open("/stage-at-build").read().strip(), os.environ.get("STAGE")

SECRET_HASH = os.environ.get("SECRET_HASH", "")
secret_image = Image().add_commands([
    f'test "$(printf %s "$BUILD_TOKEN" | sha256sum | cut -c1-64)" = "{SECRET_HASH}" && echo secret-seen',
    'echo "echoed: $BUILD_TOKEN"; echo secret-step-done > /secret-step',
]).with_secrets(["BUILD_TOKEN"])

@function(name="secret_fn", image=secret_image, cpu=0.5, memory=128)
def secret_fn():
    return open("/secret-step").read().strip(), os.environ.get("BUILD_TOKEN", "absent")

PRIVATE_BASE = os.environ.get("PRIVATE_BASE") or None
private_creds = {"REGISTRY_USERNAME": os.environ.get("REG_USER", ""), "REGISTRY_PASSWORD": os.environ.get("REG_PASS", "")}

@function(name="private_fn", image=Image(base_image=PRIVATE_BASE, base_image_creds=private_creds), cpu=0.5, memory=128)
def private_fn():
    return "ran on the private base"

@function(name="private_nocreds", image=Image(base_image=PRIVATE_BASE).add_commands(["true"]), cpu=0.5, memory=128)
def private_nocreds():
    return "never"

DOCKERFILE = os.environ.get("DOCKERFILE_PATH")

@function(name="dockerfile_fn", image=Image.from_dockerfile(DOCKERFILE) if DOCKERFILE else Image(), cpu=0.5, memory=128)
def dockerfile_fn():
    return open("/opt/app/copied.txt").read().strip(), open("/opt/app/data/nested.txt").read().strip(), os.environ.get("FROM_DOCKERFILE")

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "numpy":
        print("result:", np_sum.remote(10))
    elif case == "pip":
        print("result:", demo.remote())
    elif case == "req":
        print("result:", demo_req.remote())
    elif case == "env":
        print("result:", env_check.remote())
    elif case == "secret":
        print("result:", secret_fn.remote())
    elif case == "private":
        print("result:", private_fn.remote())
    elif case == "private-nocreds":
        try:
            private_nocreds.remote()
        except ImageBuildError as e:
            print("ImageBuildError:", e)
    elif case == "dockerfile":
        print("result:", dockerfile_fn.remote())
    elif case == "broken":
        try:
            broken.remote()
        except ImageBuildError as e:
            print("ImageBuildError:", e)
`;

test("image builds end to end: apt, pip from a local index, step cache, failures", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td, (names) => [
    ...["--pip-index-url", `http://${indexHost(names.octet)}:${INDEX_PORT}/simple/`],
    ...["--pip-trusted-host", indexHost(names.octet)],
  ]);
  const outside = await createOutside(td, up.names);
  assert.equal(outside.primary4, indexHost(up.names.octet));

  // The package index: a wheel made here, served inside the outside namespace.
  const indexDir = join(up.home, "index");
  mkdirSync(indexDir);
  await up.python(["-c", MAKE_INDEX, indexDir]);
  const server: ChildProcess = spawn(
    "ip",
    ["netns", "exec", outside.netns, "python3", "-m", "http.server", String(INDEX_PORT)].concat([
      "--bind",
      outside.primary4,
      "--directory",
      indexDir,
    ]),
    { stdio: "ignore" },
  );
  const serverExited = new Promise((r) => server.once("exit", r));
  td.defer(async () => {
    server.kill("SIGKILL");
    await serverExited;
  });
  writeFileSync(join(up.appDir, "app.py"), APP);
  writeFileSync(join(up.appDir, "requirements.txt"), "# the test's own package\nberthdemo==1.0\n");
  const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;
  const images = async () =>
    (
      (await (await up.api(`/api/v1/image/${ws}`)).json()) as {
        images: { image_id: string; status: string; steps: string[]; error: string }[];
      }
    ).images;

  await t.test("a function whose image apt-installs python3-numpy returns a numpy result", async () => {
    const out = await up.python(["app.py", "numpy"], 600_000);
    assert.match(out, /result: \(45, 'first-variant'\)/);
    assert.match(out, /step 1\/3 apt-get update -qq/);
    assert.match(out, /step 2 .*python3-numpy … built in [\d.]+ s/);
    assert.match(out, /step 3 echo first-variant > \/variant … built in/);
  });

  await t.test("building the same image again runs no step", async () => {
    const out = await up.python(["app.py", "numpy"], 300_000);
    assert.match(out, /result: \(45, 'first-variant'\)/);
    for (const n of [1, 2, 3]) assert.match(out, new RegExp(`step ${n} .* … cached`));
    assert.doesNotMatch(out, /built in/);
  });

  await t.test("changing only the last step reruns only that step", async () => {
    const out = await up.python(["app.py", "numpy"], 300_000, {
      LAST_STEP: "echo second-variant > /variant",
      FN_NAME: "np_sum_v2",
    });
    assert.match(out, /result: \(45, 'second-variant'\)/);
    assert.match(out, /step 1 .* … cached/);
    assert.match(out, /step 2 .* … cached/);
    assert.match(out, /step 3 echo second-variant > \/variant … built in/);
  });

  await t.test("python_packages install from the cluster's package index", async () => {
    const out = await up.python(["app.py", "pip"], 600_000);
    assert.match(out, /result: hello from berthdemo 1.0/);
    assert.match(out, /pip install berthdemo … built in/);
  });

  await t.test("a requirements file works the same way", async () => {
    const out = await up.python(["app.py", "req"], 600_000);
    assert.match(out, /result: req: hello from berthdemo 1.0/);
    assert.match(out, /step 1 ensure pip … cached/, "the pip bootstrap layer is shared with the other image");
    assert.match(out, /pip install berthdemo==1.0 … built in/);
  });

  await t.test(
    "with_envs: the variables are set in the build's steps and in the running function",
    async () => {
      const out = await up.python(["app.py", "env"], 300_000);
      assert.match(out, /result: \('staged', 'staged'\)/);
    },
  );

  await t.test(
    "a failing step raises ImageBuildError with the step, its exit code and output; no image is ready",
    async () => {
      const out = await up.python(["app.py", "broken"], 300_000);
      assert.match(
        out,
        /ImageBuildError: .*step 2\/2 \(echo bad-output; echo on-stderr >&2; exit 3\) exited with code 3/,
      );
      assert.match(out, /bad-output/);
      assert.match(out, /on-stderr/);
      const list = await images();
      const broken = list.filter((i) => i.steps.includes("echo before-the-failure"));
      assert.equal(broken.length, 1);
      assert.equal(broken[0]?.status, "failed");
      assert.match(broken[0]?.error ?? "", /exited with code 3/);
    },
  );

  await t.test(
    "with_secrets: a step reads the secret; no layer, config, progress line or cluster log holds it",
    async () => {
      const secret = `build-secret-${randomBytes(12).toString("hex")}`;
      const put = await up.api(`/api/v1/secret/${ws}`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "BUILD_TOKEN", value: secret }),
      });
      assert.equal(put.status, 201, await put.text());
      const hash = createHash("sha256").update(secret).digest("hex");
      const out = await up.python(["app.py", "secret"], 300_000, { SECRET_HASH: hash });
      assert.match(out, /secret-seen/);
      assert.match(out, /echoed: \*\*\*/);
      assert.match(
        out,
        /result: \('secret-step-done', 'absent'\)/,
        "the running function does not get a build secret",
      );
      assert.ok(!out.includes(secret), "the SDK printed no secret");
      assert.ok(!up.output().includes(secret), "the cluster's logs hold no secret");
      const blobs = spawnSync("grep", ["-rlF", "--", secret, join(up.dataDir, "agent")], {
        encoding: "utf8",
      });
      assert.equal(
        blobs.stdout,
        "",
        `no file of the agent (image blobs, layers, configs) holds it: ${blobs.stdout}`,
      );
      // A file removed while grep walks (a container of the cluster going away)
      // is no finding; any other error means a file went unread.
      const unread = blobs.stderr
        .split("\n")
        .filter((l) => l !== "" && !/No such file or directory$/.test(l));
      assert.deepEqual(unread, [], "grep read every file of the agent");
      const listed = JSON.stringify(await images());
      assert.ok(!listed.includes(secret));
    },
  );

  await t.test(
    "base_image from a registry that wants a password: works with base_image_creds, a clear error without",
    async () => {
      const auth = { user: "e2e-user", password: `pw-${randomBytes(8).toString("hex")}` };
      const registry = await startTestRegistry(t, { auth });
      const ref = await pushTestImage(registry, "private/python", "e2e");
      const env = { PRIVATE_BASE: ref, REG_USER: auth.user, REG_PASS: auth.password };
      const out = await up.python(["app.py", "private"], 300_000, env);
      assert.match(out, /result: ran on the private base/);
      assert.ok(
        !out.includes(auth.password) && !up.output().includes(auth.password),
        "the password is printed nowhere",
      );
      const refused = await up.python(["app.py", "private-nocreds"], 300_000, { PRIVATE_BASE: ref });
      assert.match(refused, /ImageBuildError: .*refused access to .*private\/python/);
    },
  );

  await t.test("from_dockerfile builds a Dockerfile that COPYs from its context", async () => {
    const registry = await startTestRegistry(t);
    const base = await pushTestImage(registry, "public/python", "df");
    const ctx = join(up.home, "docker-context");
    mkdirSync(join(ctx, "data"), { recursive: true });
    writeFileSync(join(ctx, "app.txt"), "copied from the context\n");
    writeFileSync(join(ctx, "data", "nested.txt"), "nested file\n");
    writeFileSync(
      join(ctx, "Dockerfile"),
      [
        `FROM ${base}`,
        "ENV FROM_DOCKERFILE=yes",
        "WORKDIR /opt/app",
        "COPY app.txt ./",
        "COPY data ./data",
        'RUN cp app.txt copied.txt && test "$FROM_DOCKERFILE" = yes',
      ].join("\n"),
    );
    const out = await up.python(["app.py", "dockerfile"], 300_000, {
      DOCKERFILE_PATH: join(ctx, "Dockerfile"),
    });
    assert.match(out, /result: \('copied from the context', 'nested file', 'yes'\)/);
    assert.match(out, /COPY app.txt \.\/ … built in/);
  });

  await t.test("the REST API lists the workspace's images with their status", async () => {
    const list = await images();
    assert.equal(list.filter((i) => i.status === "ready").length, 8, JSON.stringify(list));
    const other = await up.api("/api/v1/image/ws-not-mine");
    assert.equal(other.status, 404);
    // No step container is left on the agent.
    await waitUntil(
      async () => {
        const ps = await up.cli([
          "agent",
          "ps",
          "--all",
          "--json",
          "--socket",
          join(up.dataDir, "agent", "agent.sock"),
        ]);
        return (
          ps.code === 0 && !(JSON.parse(ps.stdout) as { id: string }[]).some((c) => c.id.startsWith("bld-"))
        );
      },
      { what: "no build container left", timeoutMs: 30_000, intervalMs: 500 },
    );
  });
});
