"""MIG slices (gpu="A100:1g.10gb") and shared GPUs (gpu_memory=) on every decorator, Sandbox and Pod (docs/gpus.md)."""

import unittest

from berth import Pod, Sandbox, asgi, endpoint, function, realtime, schedule, task_queue
from berth.api.options import parse_gpu_memory


def handler():
    return None


class GpuMemoryTest(unittest.TestCase):
    def test_parse(self):
        self.assertEqual(parse_gpu_memory(None, ["H100"], 2), (2, None))
        self.assertEqual(parse_gpu_memory("8Gi", [], 0), (1, 8192))
        self.assertEqual(parse_gpu_memory(512, ["H200"], 1), (1, 512))
        with self.assertRaisesRegex(ValueError, "gpu_memory .* is not understood"):
            parse_gpu_memory("lots", [], 0)
        with self.assertRaisesRegex(ValueError, "gpu_count must be 1, got 2"):
            parse_gpu_memory("8Gi", ["H100"], 2)
        with self.assertRaisesRegex(ValueError, "a MIG slice \\(A100:1g.10gb\\) cannot be shared"):
            parse_gpu_memory("4Gi", ["A100:1g.10gb"], 1)

    def test_every_decorator_sends_its_share_in_extra(self):
        made = {
            "function": function(gpu="H200", gpu_memory="8Gi")(handler),
            "endpoint": endpoint(name="e", gpu="H200", gpu_memory="8Gi")(handler),
            "asgi": asgi(name="a", gpu="H200", gpu_memory="8Gi")(handler),
            "task_queue": task_queue(name="q", gpu="H200", gpu_memory="8Gi")(handler),
            "realtime": realtime(name="r", gpu="H200", gpu_memory="8Gi")(handler),
            "schedule": schedule(when="*/5 * * * *", gpu="H200", gpu_memory="8Gi")(handler),
            "sandbox": Sandbox(gpu="H200", gpu_memory="8Gi"),
            "pod": Pod(entrypoint=["true"], gpu="H200", gpu_memory="8Gi"),
        }
        for kind, obj in made.items():
            with self.subTest(kind=kind):
                extra = obj.stub_extra()
                self.assertEqual(extra["gpu_memory_mib"], 8192)
                self.assertEqual((extra["gpu_types"], extra["gpu_count"]), (["H200"], 1))
                self.assertNotIn("gpu_memory_mib", obj.stub_config(), "stub.config keeps the spec's fields only")

    def test_any_shared_gpu_and_no_share(self):
        f = function(gpu_memory=2048)(handler)
        self.assertEqual((f.stub_extra()["gpu_types"], f.stub_extra()["gpu_count"]), ([], 1))
        self.assertNotIn("gpu_memory_mib", function(gpu="H100")(handler).stub_extra())
        self.assertNotIn("gpu_memory_mib", Sandbox().stub_extra())

    def test_mig_slice_is_a_gpu_type(self):
        f = function(gpu="A100:1g.10gb")(handler)
        self.assertEqual((f.stub_extra()["gpu_types"], f.stub_extra()["gpu_count"]), (["A100:1g.10gb"], 1))
        self.assertEqual(f.stub_config()["runtime"]["gpu"], "A100:1g.10gb")
        with self.assertRaises(ValueError):
            Sandbox(gpu="H200:1g.18gb", gpu_count=2)


if __name__ == "__main__":
    unittest.main()
