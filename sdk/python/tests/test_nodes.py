"""nodes= on @function and Pod (a gang across hosts, shared/gang.ts).

Validated at once; sent in stub.extra only for a gang.
"""

import unittest

from berth import Pod, Sandbox, endpoint, function


def handler():
    return None


class NodesOptionTest(unittest.TestCase):
    def test_a_gang_sends_nodes_in_extra(self):
        f = function(nodes=2, gpu="H100", gpu_count=8)(handler)
        self.assertEqual(f.stub_extra()["nodes"], 2)
        self.assertEqual(f.stub_extra()["gpu_count"], 8, "gpu_count stays per rank")
        self.assertNotIn("nodes", f.stub_config(), "stub.config keeps the spec's fields only")
        self.assertEqual(function(nodes=64)(handler).stub_extra()["nodes"], 64)
        self.assertEqual(Pod(entrypoint=["true"], nodes=3).stub_extra()["nodes"], 3)

    def test_one_node_sends_nothing(self):
        for obj in (function(handler), function(nodes=1)(handler), Pod(entrypoint=["true"]), Sandbox()):
            with self.subTest(obj=type(obj).__name__):
                self.assertNotIn("nodes", obj.stub_extra())

    def test_bad_values_are_refused_at_once(self):
        for bad in (0, -1, 65, True, 2.0, "2", None):
            with self.subTest(nodes=bad):
                with self.assertRaisesRegex(ValueError, r"nodes must be an int from 1 to 64 .*got "):
                    function(nodes=bad)(handler)
                with self.assertRaisesRegex(ValueError, "nodes must be an int from 1 to 64"):
                    Pod(entrypoint=["true"], nodes=bad)

    def test_only_functions_and_pods_take_nodes(self):
        with self.assertRaisesRegex(TypeError, "has no parameter nodes"):
            endpoint(name="e", nodes=2)(handler)
        with self.assertRaises(TypeError):
            Sandbox(nodes=2)


if __name__ == "__main__":
    unittest.main()
