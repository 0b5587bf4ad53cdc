"""Decorator options: memory, GPUs, CPU, task policy, retry_for; the Image builder and Context."""

import dataclasses
import json
import os
from unittest import mock
import datetime
import unittest

from berth import Context, Function, Image, ImageBuildError, TaskPolicy, function
from berth.api.options import cpu_fields, expires_text, parse_gpu, parse_memory, retry_names


def plain(x):
    return x


class MemoryTest(unittest.TestCase):
    def test_units(self):
        cases = {128: 128, "512Mi": 512, "2Gi": 2048, "1G": 1000, "512M": 512, "256": 256, "1.5Gi": 1536, "64MiB": 64}
        for given, mib in cases.items():
            self.assertEqual(parse_memory(given), mib, given)

    def test_rejected(self):
        for bad in ("lots", "12Qi", "", "-5", 0, -1, True, "0.5Mi", None):
            with self.assertRaises(ValueError, msg=repr(bad)) as ctx:
                parse_memory(bad)
            self.assertIn("memory", str(ctx.exception))


class GpuCpuTest(unittest.TestCase):
    def test_gpu(self):
        self.assertEqual(parse_gpu(None, 0), ([], 0))
        self.assertEqual(parse_gpu("A10G", 0), (["A10G"], 1))
        self.assertEqual(parse_gpu(["H100", "A100"], 2), (["H100", "A100"], 2))
        with self.assertRaises(ValueError):
            parse_gpu(None, 1)
        with self.assertRaises(ValueError):
            parse_gpu([""], 0)

    def test_mig_slice(self):
        self.assertEqual(parse_gpu("A100:1g.10gb", 0), (["A100:1g.10gb"], 1))
        self.assertEqual(parse_gpu(["H200:1g.18gb", "H200"], 1), (["H200:1g.18gb", "H200"], 1))
        self.assertEqual(parse_gpu("H200:1g.18gb+me", 1), (["H200:1g.18gb+me"], 1))
        with self.assertRaisesRegex(ValueError, "not a MIG slice"):
            parse_gpu("A100:big", 0)
        with self.assertRaisesRegex(ValueError, "one per container"):
            parse_gpu("A100:1g.10gb", 2)

    def test_cpu(self):
        self.assertEqual(cpu_fields(1.0), (1, 1000))
        self.assertEqual(cpu_fields(0.25), (1, 250))
        self.assertEqual(cpu_fields(2.5), (3, 2500))
        # Strings as the spec allows for pods and beta9 programs give @function: cores or millicores.
        self.assertEqual(cpu_fields("100m"), (1, 100))
        self.assertEqual(cpu_fields("500m"), (1, 500))
        self.assertEqual(cpu_fields("1.5"), (2, 1500))
        self.assertEqual(cpu_fields("2"), (2, 2000))
        for bad in (0, -1, float("nan"), "0m", "1.5m", "one", "100 cores", True):
            with self.assertRaises(ValueError, msg=bad):
                cpu_fields(bad)


class PolicyTest(unittest.TestCase):
    def test_expires(self):
        self.assertEqual(expires_text(None), "")
        self.assertEqual(expires_text(180), "180")
        when = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        self.assertEqual(expires_text(when), "2030-01-02T03:04:05Z")

    def test_task_policy_overrides(self):
        f = Function(plain, timeout=10, retries=5, task_policy=TaskPolicy(max_retries=0, timeout=-1))
        self.assertEqual((f.timeout, f.retries), (-1, 0))

    def test_retry_names(self):
        class Local(Exception):
            pass

        self.assertEqual(retry_names([KeyError, "pkg.Custom"]), ["KeyError", "pkg.Custom"])
        self.assertEqual(retry_names([Local]), [f"{__name__}.{Local.__qualname__}"])

    def test_bad_values(self):
        for kw in ({"timeout": 0}, {"retries": -1}, {"cpu": 0}, {"memory": "x"}, {"keep_warm_seconds": -2}):
            with self.assertRaises(ValueError, msg=kw):
                Function(plain, **kw)

    def test_bare_and_called_decorator(self):
        self.assertIsInstance(function(plain), Function)
        f = function(cpu=2)(plain)
        self.assertEqual((f.cpu, f.memory, f.gpu_count, f.keep_warm_seconds), (2, 128, 0, 10))
        self.assertEqual(f.local(3), 3, ".local() runs it here")
        self.assertEqual(f.__name__, "plain")


class ImageTest(unittest.TestCase):
    def test_chaining_records_and_changes_the_id(self):
        base = Image()
        img = Image().add_python_packages(["numpy"]).add_commands(["echo hi"]).with_envs({"A": "1"})
        self.assertIs(img.with_secrets(["S"]), img)
        self.assertIs(img.micromamba().add_micromamba_packages(["x"], ["conda-forge"]).build_with_gpu("T4"), img)
        self.assertEqual((img.python_packages, img.commands, img.env_vars), (["numpy"], ["echo hi"], ["A=1"]))
        self.assertNotEqual(base.image_id, img.image_id)
        self.assertRegex(base.image_id, r"^img-[0-9a-f]{16}$")
        self.assertEqual(Image().image_id, base.image_id, "same spec, same id")

    def test_registry_forms(self):
        a = Image.from_registry("r.example/app:1")
        b = Image(python_version="3.11").from_registry("r.example/app:1")
        self.assertEqual((a.image_ref, b.image_ref, b.python_version), ("r.example/app:1", "r.example/app:1", "3.11"))
        a.check_runnable("f")  # nothing to build

    def test_builds_are_refused_naming_what_was_asked(self):
        for img, word in ((Image.from_id("snap-1"), "snap-1"),):
            with self.assertRaises(ImageBuildError) as ctx:
                img.check_runnable("fn")
            self.assertIn(word, str(ctx.exception))

    def test_packages_commands_and_env_are_built(self):
        for img in (
            Image(python_packages=["torch"]),
            Image(commands=["apt-get install x"]),
            Image(env_vars="A=1"),
            Image().micromamba(),
            Image().add_micromamba_packages(["numpy"], ["https://conda.local/forge"]),
            Image().build_with_gpu("A10G"),
        ):
            img.check_runnable("fn")  # the cluster builds these
            self.assertTrue(img.needs_build())
        self.assertFalse(Image.from_registry("r.example/app:1").needs_build())
        self.assertFalse(Image().needs_build())

    def test_private_base_credentials(self):
        img = Image(base_image="r.example/p:1", base_image_creds={"REGISTRY_USERNAME": "u", "REGISTRY_PASSWORD": "pw"})
        self.assertTrue(img.needs_build())
        self.assertEqual(img.credential_values(), {"REGISTRY_USERNAME": "u", "REGISTRY_PASSWORD": "pw"})
        self.assertNotIn("pw", json.dumps(img.spec()))  # the spec names them only
        listed = Image.from_registry("r.example/p:1", ["BERTH_T_USER", "BERTH_T_PASS"])
        with mock.patch.dict(os.environ, {"BERTH_T_USER": "u2", "BERTH_T_PASS": "p2"}):
            self.assertEqual(listed.credential_values(), {"BERTH_T_USER": "u2", "BERTH_T_PASS": "p2"})
        with mock.patch.dict(os.environ, {"BERTH_T_USER": "u2"}, clear=False):
            os.environ.pop("BERTH_T_PASS", None)
            with self.assertRaises(ImageBuildError) as ctx:
                listed.credential_values()
        self.assertIn("BERTH_T_PASS", str(ctx.exception))
        self.assertNotIn("u2", str(ctx.exception))

    def test_env_vars_forms(self):
        self.assertEqual(Image(env_vars="A=1").env_vars, ["A=1"])
        self.assertEqual(Image(env_vars=["A=1", "B=2"]).env_vars, ["A=1", "B=2"])
        with self.assertRaises(ValueError):
            Image(env_vars="nokey")


class ContextTest(unittest.TestCase):
    def test_fields_and_defaults(self):
        fields = {f.name: f.default for f in dataclasses.fields(Context)}
        self.assertEqual(
            fields,
            {
                "container_id": None,
                "stub_id": None,
                "stub_type": None,
                "callback_url": None,
                "task_id": None,
                "timeout": None,
                "on_start_value": None,
                "bind_port": 0,
                "python_version": "",
            },
        )


if __name__ == "__main__":
    unittest.main()


class IsolationTest(unittest.TestCase):
    """isolation= on functions, deployments, sandboxes and pods: sent as the stub's extra only when "gvisor"."""

    def test_sent_when_gvisor(self):
        from berth import Pod, Sandbox, endpoint

        self.assertEqual(Sandbox(isolation="gvisor").stub_extra()["isolation"], "gvisor")
        self.assertEqual(Pod(entrypoint=["true"], isolation="gvisor").stub_extra()["isolation"], "gvisor")
        self.assertEqual(function(isolation="gvisor")(plain).stub_extra()["isolation"], "gvisor")
        self.assertEqual(endpoint(isolation="gvisor")(plain).stub_extra()["isolation"], "gvisor")
        for default in (Sandbox(), Pod(entrypoint=["true"]), function()(plain), Sandbox(isolation="container")):
            self.assertNotIn("isolation", default.stub_extra())

    def test_rejected(self):
        from berth import Sandbox

        for bad in ("runsc", "", None, "GVISOR"):
            with self.assertRaises(ValueError, msg=repr(bad)) as ctx:
                Sandbox(isolation=bad)
            self.assertIn("isolation must be one of 'container', 'gvisor'", str(ctx.exception))
            with self.assertRaises(ValueError):
                function(isolation=bad)(plain)
