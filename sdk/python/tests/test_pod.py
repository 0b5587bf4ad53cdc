"""Pod: its options, create(), deploy() and `berth deploy file.py:pod` (berth.client.describe); the unit parsers."""

import contextlib
import importlib
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from berth import Image, Pod, PodCreateResult
from berth.errors import BerthError
from berth.sandbox.units import check_egress, parse_cpu, parse_gpu, parse_memory
from tests.sandbox_support import SandboxTestCase

SDK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

APP = """
from berth import Image, Pod

web = Pod(
    entrypoint=["python3", "-m", "http.server", "8000"],
    ports=[8000, 9000],
    cpu="250m",
    memory="512Mi",
    gpu="A10G",
    env={"MODE": "prod"},
    allow_list=["10.0.0.0/8"],
)
named = Pod(name="api", entrypoint=["python3", "serve.py"], ports=[8080], authorized=True, keep_warm_seconds=30)
bare = Pod(ports=[8000])
from_snapshot = Pod(entrypoint=["true"], image=Image.from_id("img-abc"))
"""


class UnitsTest(unittest.TestCase):
    def test_cpu(self):
        self.assertEqual(parse_cpu(1), (1, 1000))
        self.assertEqual(parse_cpu(1.0), (1, 1000))
        self.assertEqual(parse_cpu(0.25), (1, 250))
        self.assertEqual(parse_cpu("500m"), (1, 500))
        self.assertEqual(parse_cpu("1500m"), (2, 1500))
        self.assertEqual(parse_cpu("2"), (2, 2000))
        self.assertEqual(parse_cpu(" 1.5 "), (2, 1500))
        for bad in ("", "m", "1.5m", "-1", "1 core", 0, -1, float("nan"), True, None, "0m"):
            with self.subTest(cpu=bad), self.assertRaises(ValueError):
                parse_cpu(bad)

    def test_memory(self):
        self.assertEqual(parse_memory(128), 128)
        self.assertEqual(parse_memory("512Mi"), 512)
        self.assertEqual(parse_memory("2Gi"), 2048)
        for bad in ("2 parsecs", 0, -5, "1.5Mi", True):
            with self.subTest(memory=bad), self.assertRaises(ValueError):
                parse_memory(bad)

    def test_gpu(self):
        self.assertEqual(parse_gpu(None, 0), ([], 0))
        self.assertEqual(parse_gpu("A10G", 0), (["A10G"], 1))
        self.assertEqual(parse_gpu(["H100", "A100"], 0), (["H100", "A100"], 1))
        self.assertEqual(parse_gpu(["H100"], 4), (["H100"], 4))
        with self.assertRaises(ValueError):
            parse_gpu(None, 2)
        with self.assertRaises(ValueError):
            parse_gpu([3], 0)

    def test_egress(self):
        self.assertEqual(check_egress(False, None), (False, None))
        self.assertEqual(check_egress(True, None), (True, None))
        self.assertEqual(check_egress(False, []), (False, []))
        self.assertEqual(check_egress(False, [" 10.1.2.3/8", "::/0"]), (False, ["10.1.2.3/8", "::/0"]))
        bad = [
            (True, ["10.0.0.0/8"]),
            (False, ["10.0.0.0/8"] * 11),
            (False, ["10.0.0.0"]),
            (False, ["10.0.0.0/"]),
            (False, ["fe80::1%eth0/64"]),
            (False, ["2001:db8::/129"]),
            (False, [8]),
            ("yes", None),
        ]
        for block, allow in bad:
            with self.subTest(block=block, allow=allow), self.assertRaises(ValueError):
                check_egress(block, allow)


class PodOptionsTest(unittest.TestCase):
    def test_defaults(self):
        pod = Pod(entrypoint=["true"])
        self.assertEqual((pod.cpu, pod.cpu_millicores, pod.memory), (1, 1000, 128))
        self.assertEqual((pod.gpu_types, pod.gpu_count, pod.ports), ([], 0, []))
        self.assertEqual((pod.keep_warm_seconds, pod.authorized, pod.block_network, pod.allow_list), (-1, False, False, None))
        self.assertEqual((pod.name, pod.volumes, pod.secrets, pod.env), (None, None, [], {}))
        config = pod.stub_config()
        self.assertEqual((config["keep_warm_seconds"], config["authorized"], config["handler"]), (-1, False, "berth.pod:Pod"))
        self.assertEqual(pod.stub_extra()["entrypoint"], ["true"])
        self.assertEqual(pod.module, __name__, "the pod remembers the module that defined it")

    def test_bad_options(self):
        cases = [
            dict(entrypoint="python3 app.py"),
            dict(entrypoint=["python3", 3]),
            dict(entrypoint=[""]),
            dict(name=""),
            dict(name="a/b"),
            dict(keep_warm_seconds=-2),
            dict(cpu="fast"),
            dict(memory="lots"),
            dict(allow_list=["10.0.0.0/8"] * 11),
            dict(allow_list=["not-a-cidr"]),
            dict(block_network=True, allow_list=["10.0.0.0/8"]),
            dict(ports=[65536]),
        ]
        for options in cases:
            with self.subTest(options=options), self.assertRaises(ValueError):
                Pod(**options)
        with self.assertRaises(TypeError):
            Pod(authorized="yes")
        with self.assertRaises(TypeError):
            Pod(image="python:3.11")


class PodGatewayTest(SandboxTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.appdir = tempfile.mkdtemp(dir=cls.tmp.name)
        with open(os.path.join(cls.appdir, "pod_app.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        with open(os.path.join(cls.appdir, "serve.py"), "w") as f:
            f.write("print('serving')\n")
        sys.path.insert(0, cls.appdir)
        cls.app = importlib.import_module("pod_app")

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.appdir)
        sys.modules.pop("pod_app", None)
        super().tearDownClass()

    def test_create_registers_a_pod_stub_and_syncs_its_directory(self):
        result = self.app.web.create()
        self.assertIsInstance(result, PodCreateResult)
        self.assertTrue(result.ok, result.error)
        self.assertTrue(result.container_id.startswith("ctr-"))
        self.assertEqual(result.url, f"{self.gw.url}/port/{result.container_id}/8000/")
        self.assertEqual(set(result.urls), {8000, 9000})
        body = self.gw.stub_bodies[-1]
        self.assertEqual(body["type"], "pod")
        self.assertTrue(body["name"].startswith("pod-"))
        self.assertEqual(body["config"]["runtime"], {"cpu": 1, "gpu": "A10G", "memory": 512, "image_id": Image().image_id})
        extra = body["extra"]
        self.assertEqual(extra["entrypoint"], ["python3", "-m", "http.server", "8000"])
        self.assertEqual((extra["cpu_millicores"], extra["gpu_count"], extra["ports"]), (250, 1, [8000, 9000]))
        self.assertEqual((extra["allow_list"], extra["block_network"], extra["env"]), (["10.0.0.0/8"], False, {"MODE": "prod"}))
        self.assertNotIn("ttl_seconds", extra)
        self.assertIn(extra["code_sha256"], self.gw.objects, "the pod's directory was uploaded")
        self.assertNotIn("entrypoint", self.fake.pods[-1], "the stub's entrypoint is used")

    def test_create_with_an_entrypoint_of_its_own(self):
        result = self.app.bare.create(entrypoint=["python3", "serve.py"])
        self.assertTrue(result.ok, result.error)
        self.assertEqual(self.fake.pods[-1]["entrypoint"], ["python3", "serve.py"])
        self.assertNotIn("entrypoint", self.gw.stub_bodies[-1]["extra"])
        with self.assertRaisesRegex(ValueError, "needs an entrypoint"):
            self.app.bare.create()

    def test_image_from_a_snapshot(self):
        self.assertTrue(self.app.from_snapshot.create().ok)
        self.assertEqual(self.gw.stub_bodies[-1]["extra"]["image_ref"], "img-abc")

    def test_a_pod_whose_entrypoint_exits_0_ran(self):
        result = Pod(name="batch", entrypoint=["python3", "serve.py"]).create(entrypoint=["true"])
        self.assertTrue(result.ok, result.error)
        self.assertEqual((result.status, result.exit_code), ("terminated", 0))
        self.assertEqual(result.wait(timeout=5), 0)

    def test_refresh_reads_the_status_and_exit_code_again(self):
        result = Pod(name="job", entrypoint=["python3", "serve.py"]).create()
        self.assertEqual((result.status, result.exit_code), ("running", None))
        self.fake.pod_records[result.container_id].update(status="terminated", exit_code=3)
        self.assertIs(result.refresh(), result)
        self.assertEqual((result.status, result.exit_code), ("terminated", 3))
        self.assertEqual(result.wait(), 3)

    def test_a_refusal_is_a_result_that_says_why(self):
        refused = Pod(name="refused", entrypoint=["true"])
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            result = refused.create()
        self.assertEqual((result.ok, result.code, result.container_id), (False, "invalid_request", ""))
        self.assertIn("no such thing", result.error)
        self.assertEqual(result.error_msg, result.error, "beta9's name for it")
        with self.assertRaisesRegex(BerthError, "did not start"):
            result.refresh()
        # Also printed: a program that never reads result.error still tells its user why.
        self.assertIn("berth: the pod did not start: ", err.getvalue())
        self.assertIn("no such thing", err.getvalue())

    def test_deploy(self):
        self.assertTrue(self.app.named.deploy())
        body = self.fake.deployments[-1]
        self.assertEqual((body["name"], body["type"]), ("api", "pod"))
        self.assertEqual((body["config"]["keep_warm_seconds"], body["config"]["authorized"]), (30, True))
        self.assertEqual(body["extra"]["entrypoint"], ["python3", "serve.py"])
        self.assertIn(body["extra"]["code_sha256"], self.gw.objects)
        self.assertEqual(self.app.named.deployment["url"], f"{self.gw.url}/endpoint/api")
        self.assertTrue(self.app.web.deploy(name="web"))
        self.assertEqual(self.fake.deployments[-1]["name"], "web")
        with self.assertRaisesRegex(ValueError, "needs a name"):
            self.app.web.deploy()
        with self.assertRaisesRegex(ValueError, "entrypoint"):
            self.app.bare.deploy(name="bare")


class PodDescribeTest(unittest.TestCase):
    """`berth deploy app.py:pod` learns what to register from `python3 -m berth.client.describe`."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        with open(os.path.join(self.tmp.name, "podapp.py"), "w") as f:
            f.write(textwrap.dedent(APP))

    def describe(self, target, *args):
        env = dict(os.environ, PYTHONPATH=SDK)
        p = subprocess.run(
            [sys.executable, "-m", "berth.client.describe", target, *args],
            cwd=self.tmp.name,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])

    def test_a_pod_describes_as_type_pod(self):
        code, out = self.describe("podapp.py:web")
        self.assertEqual(code, 0, out)
        self.assertEqual((out["type"], out["name"], out["root"]), ("pod", "web", self.tmp.name))
        self.assertEqual(out["extra"]["entrypoint"], ["python3", "-m", "http.server", "8000"])
        self.assertEqual(out["config"]["keep_warm_seconds"], -1)
        self.assertEqual(out["config"]["runtime"]["cpu"], 1)
        code, out = self.describe("podapp.py:named")
        self.assertEqual((code, out["name"], out["config"]["authorized"]), (0, "api", True))
        code, out = self.describe("podapp.py:web", "--name", "other")
        self.assertEqual((code, out["name"]), (0, "other"))
        code, out = self.describe("podapp.py:from_snapshot")
        self.assertEqual((code, out["extra"]["image_ref"]), (0, "img-abc"))

    def test_a_pod_without_entrypoint_is_refused(self):
        code, out = self.describe("podapp.py:bare")
        self.assertEqual((code, out["ok"]), (2, False))
        self.assertIn("no entrypoint", out["error"])

    def test_missing_object_lists_pods(self):
        code, out = self.describe("podapp.py:nope")
        self.assertEqual(code, 2)
        self.assertIn("bare, from_snapshot, named, web", out["error"])


if __name__ == "__main__":
    unittest.main()
