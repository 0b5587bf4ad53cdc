// Images from the CLI, in deploys, in events and from a sandbox snapshot, end
// to end on one `berth up` cluster through the real CLI and SDK:
// `berth image build` streams each step with its built/cached mark and time
// and a second build runs nothing; `.map()` of a function of that image
// builds nothing more; after the image changes, the function's idle
// container of the old image takes no task (a container of the new one runs
// it); `berth image list` (table and --json) shows the image ready;
// `berth deploy` of an endpoint whose image needs a build builds it first and
// the endpoint answers from the built image; the events history holds
// image.building and image.ready (image.failed for a failed build);
// `berth image rm` refuses the image an active deployment runs, then removes
// it once the deployment is stopped; a deploy whose build fails exits with
// ImageBuildError naming the step and deploys nothing; a function whose
// image is `Image.from_id` of a sandbox's filesystem snapshot runs from it.

import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { bearer } from "../helpers/auth.ts";
import { UP_COMMANDS, startBerthUp } from "../helpers/berth-up.ts";
import { needs } from "../helpers/env.ts";
import { Teardown } from "../network/helpers.ts";

const APP = `
import os, sys
from berth import Image, Sandbox, endpoint, function

cli_image = Image().add_commands([f"echo {os.environ.get('CLI_TAG', 'cli-built')} > /cli-built", "echo second-step"])

# Warm long enough that its container is idle, not gone, when the image changes.
@function(name="cli_fn", image=cli_image, cpu=0.25, memory=128, keep_warm_seconds=300)
def cli_fn(x):
    return open("/cli-built").read().strip(), x

@endpoint(name="built_ep", image=Image().add_commands(["echo deployed-from-build > /ep-built"]), cpu=0.25, memory=128)
def built_ep(x: int = 0):
    return {"built": open("/ep-built").read().strip(), "x": x}

@endpoint(name="broken_ep", image=Image().add_commands(["echo fine", "echo deploy-breaks; exit 4"]), cpu=0.25, memory=128)
def broken_ep():
    return {}

SNAP = os.environ.get("SNAP_ID")

@function(name="snap_fn", image=Image.from_id(SNAP) if SNAP else Image(), cpu=0.25, memory=128)
def snap_fn():
    return open("/opt/snap-state").read().strip()

if __name__ == "__main__":
    case = sys.argv[1]
    if case == "map":
        print("result:", list(cli_fn.map([1, 2])))
    elif case == "remote":
        print("result:", cli_fn.remote(3))
    elif case == "snapshot":
        sb = Sandbox(cpu=0.25, memory=128).create()
        p = sb.process.exec("sh", "-c", "mkdir -p /opt && echo state-from-sandbox > /opt/snap-state")
        assert p.wait() == 0
        print("SNAP", sb.create_image_from_filesystem())
        sb.terminate()
    elif case == "snap_fn":
        print("result:", snap_fn.remote())
`;

interface ImageJson {
  image_id: string;
  status: string;
  steps: string[];
}

test("images from the CLI, in deploys, in events and from a sandbox snapshot", async (t) => {
  if (!needs(t, { root: true, commands: UP_COMMANDS })) return;
  const td = new Teardown(t);
  const up = await startBerthUp(td);
  writeFileSync(join(up.appDir, "app.py"), APP);
  const ws = ((await (await up.api("/api/v1/workspace/current")).json()) as { external_id: string })
    .external_id;
  const cli = async (args: string[], expectCode = 0) => {
    const r = await up.cli(args, 300_000);
    assert.equal(
      r.code,
      expectCode,
      `berth ${args.join(" ")}: ${r.stdout}\n${r.stderr}\nberth up:\n${up.output().slice(-4000)}`,
    );
    return r;
  };
  const listed = async () => JSON.parse((await cli(["image", "list", "--json"])).stdout) as ImageJson[];
  const imageWithStep = async (step: string) => {
    const found = (await listed()).filter((i) => i.steps.includes(step));
    assert.equal(found.length, 1, JSON.stringify(found));
    return found[0] as ImageJson;
  };
  const events = async (subject: string) =>
    (
      (await (await up.api(`/api/v1/events/${ws}/history?type=image.*&limit=1000`)).json()) as {
        events: { type: string; subject: string; data: { status: string; error?: string } }[];
      }
    ).events.filter((e) => e.subject === subject);

  await t.test(
    "berth image build streams each step with its mark and time; again, every step is cached",
    async () => {
      const first = await cli(["image", "build", "app.py:cli_image"]);
      assert.match(first.stdout, /step 1\/2 echo cli-built > \/cli-built/);
      assert.match(first.stdout, /step 1 echo cli-built > \/cli-built … built in [\d.]+ s/);
      assert.match(first.stdout, /step 2 echo second-step … built in [\d.]+ s/);
      assert.match(first.stdout, /image img-\S+ ready \(2 steps\)/);
      const again = await cli(["image", "build", "app.py:cli_fn"]);
      assert.match(again.stdout, /step 1 echo cli-built > \/cli-built … cached/);
      assert.match(again.stdout, /step 2 echo second-step … cached/);
      assert.doesNotMatch(again.stdout, /built in/);
    },
  );

  await t.test(".map() of a function whose image the CLI built builds nothing more", async () => {
    const out = await up.python(["app.py", "map"], 300_000);
    assert.match(out, /result: \[\('cli-built', 1\), \('cli-built', 2\)\]/);
    assert.doesNotMatch(out, /built in/);
  });

  await t.test(
    "after the function's image changes, its idle container of the old image takes no task",
    async () => {
      // The map's container (old image, kept warm) is idle; the changed image makes a new stub config.
      const out = await up.python(["app.py", "remote"], 300_000, { CLI_TAG: "cli-changed" });
      assert.match(out, /step 1 echo cli-changed > \/cli-built … built in/);
      assert.match(out, /result: \('cli-changed', 3\)/);
    },
  );

  await t.test("berth image list shows the image ready (table and --json)", async () => {
    const img = (await listed()).find(
      (i) => i.steps.includes("echo cli-built > /cli-built") && i.steps.includes("echo second-step"),
    ) as ImageJson;
    assert.equal(img.status, "ready");
    assert.match(img.image_id, /^img-/);
    const table = (await cli(["image", "list"])).stdout;
    assert.match(table, /^IMAGE_ID\s+STATUS\s+BASE_IMAGE\s+STEPS/m);
    assert.match(table, new RegExp(`^${img.image_id}\\s+ready\\s+\\(default\\)\\s+2\\s`, "m"));
  });

  let epImage = "";
  await t.test(
    "berth deploy builds the image first, streaming its steps; the endpoint runs from it",
    async () => {
      const r = await cli(["deploy", "app.py:built_ep"]);
      assert.match(r.stderr, /step 1\/1 echo deployed-from-build > \/ep-built/);
      assert.match(r.stderr, /step 1 echo deployed-from-build > \/ep-built … built in [\d.]+ s/);
      assert.match(r.stdout, /deployed built_ep version 1/);
      const res = await fetch(`${up.url}/endpoint/built_ep`, {
        method: "POST",
        headers: { "content-type": "application/json", ...bearer(up.token) },
        body: '{"x": 5}',
        signal: AbortSignal.timeout(240_000),
      });
      assert.equal(res.status, 200, await res.clone().text());
      assert.deepEqual(await res.json(), { built: "deployed-from-build", x: 5 });
      epImage = (await imageWithStep("echo deployed-from-build > /ep-built")).image_id;
      assert.deepEqual(
        (await events(epImage)).map((e) => [e.type, e.data.status]),
        [
          ["image.building", "building"],
          ["image.ready", "ready"],
        ],
      );
    },
  );

  await t.test(
    "berth image rm refuses the image of an active deployment, then removes it once stopped",
    async () => {
      const refused = await up.cli(["image", "rm", epImage]);
      assert.notEqual(refused.code, 0);
      assert.match(refused.stderr, /used by the deployment built_ep: stop or delete it first/);
      const deps = (await (await up.api(`/api/v1/deployment/${ws}?name=built_ep`)).json()) as {
        deployments: { id: string }[];
      };
      await cli(["deployment", "stop", deps.deployments[0]?.id as string]);
      const removed = await cli(["image", "rm", epImage]);
      assert.match(removed.stdout, new RegExp(`removed image ${epImage}`));
      assert.ok(!(await listed()).some((i) => i.image_id === epImage));
      const gone = await up.cli(["image", "rm", epImage]);
      assert.notEqual(gone.code, 0);
      assert.match(gone.stderr, /not found/);
    },
  );

  await t.test(
    "a deploy whose build fails exits with ImageBuildError naming the step; nothing is deployed",
    async () => {
      const r = await cli(["deploy", "app.py:broken_ep"], 2);
      assert.match(
        r.stderr,
        /ImageBuildError: .*step 2\/2 \(echo deploy-breaks; exit 4\) exited with code 4/,
      );
      assert.match(r.stderr, /deploy-breaks/);
      assert.doesNotMatch(r.stdout, /deployed/);
      const deps = (await (await up.api(`/api/v1/deployment/${ws}?name=broken_ep`)).json()) as {
        deployments: unknown[];
      };
      assert.deepEqual(deps.deployments, []);
      const failed = await imageWithStep("echo deploy-breaks; exit 4");
      assert.equal(failed.status, "failed");
      const evs = await events(failed.image_id);
      assert.deepEqual(
        evs.map((e) => e.type),
        ["image.building", "image.failed"],
      );
      assert.match(evs[1]?.data.error ?? "", /exited with code 4/);
    },
  );
  await t.test("Image.from_id of a sandbox's filesystem snapshot runs a function", async () => {
    const snap = /SNAP (img-\S+)/.exec(await up.python(["app.py", "snapshot"], 300_000))?.[1];
    assert.ok(snap, "the sandbox's snapshot id");
    const out = await up.python(["app.py", "snap_fn"], 300_000, { SNAP_ID: snap });
    assert.match(out, /result: state-from-sandbox/);
  });
});
