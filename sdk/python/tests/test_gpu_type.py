"""beta9's GpuType: its members are the GPU type strings; GpuType.Any takes one GPU of any type."""

import json
import unittest

from berth import GpuType, Pod, Sandbox, function


def handler():
    return None


class GpuTypeTest(unittest.TestCase):
    def test_members_are_the_type_strings(self):
        f = function(gpu=GpuType.A10G)(handler)
        self.assertEqual((f.gpu_types, f.gpu_count), (["A10G"], 1))
        self.assertIs(type(f.gpu_types[0]), str, "sent as a plain string")
        self.assertEqual(str(GpuType.A100_80), "A100-80")
        self.assertEqual(json.dumps([GpuType.H100]), '["H100"]')
        ranked = function(gpu=[GpuType.H100, "A100-80"], gpu_count=2)(handler)
        self.assertEqual((ranked.gpu_types, ranked.gpu_count), (["H100", "A100-80"], 2))

    def test_no_gpu_and_any(self):
        self.assertEqual(Sandbox(gpu=GpuType.NoGPU).gpu_types, [])
        anything = function(gpu=GpuType.Any)(handler)
        # No type named: the scheduler takes whichever type an agent has for the one GPU.
        self.assertEqual((anything.stub_extra()["gpu_types"], anything.stub_extra()["gpu_count"]), ([], 1))
        self.assertEqual(Pod(entrypoint=["true"], gpu="any").stub_extra()["gpu_count"], 1)


if __name__ == "__main__":
    unittest.main()
