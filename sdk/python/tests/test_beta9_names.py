"""Every public name of beta9's SDK (its __init__ exports) against berth (docs/compatibility.md).

The names berth has import from ``berth``; the ones it lacks do not, so the
page's table and the package cannot drift apart. The sandbox classes beta9
exports are checked here as the objects the calls return.
"""

import importlib
import os
import unittest

import berth
from berth import (
    Sandbox,
    SandboxFilePosition,
    SandboxFileSearchMatch,
    SandboxFileSearchRange,
    SandboxFileSystem,
    SandboxInstance,
    SandboxProcess,
    SandboxProcessManager,
    SandboxProcessResponse,
    SandboxProcessStream,
)
from tests.sandbox_support import PY, SandboxTestCase

# beta9's sdk/src/beta9/__init__.py __all__, in its order.
BETA9_NAMES = [
    "Map", "Image", "Queue", "Volume", "CloudBucket", "CloudBucketConfig", "task_queue", "function", "endpoint",
    "asgi", "realtime", "Container", "env", "GpuType", "Pool", "PythonVersion", "Output", "QueueDepthAutoscaler",
    "experimental", "integrations", "schedule", "TaskPolicy", "Bot", "BotLocation", "BotEventType", "BotContext",
    "Pod", "Service", "PricingPolicy", "PricingPolicyCostModel", "Client", "Task", "Deployment", "schema", "Sandbox",
    "SandboxInstance", "SandboxProcess", "SandboxProcessStream", "SandboxProcessManager", "SandboxProcessResponse",
    "SandboxConnectionError", "SandboxProcessError", "SandboxFileSystemError", "SandboxFilePosition",
    "SandboxFileSearchRange", "SandboxFileSearchMatch", "SandboxFileInfo", "SandboxFileSystem",
    "SandboxFileSearchResult",
]  # fmt: skip

# What berth does not have (docs/compatibility.md says why for each).
MISSING = {
    "Container",
    "Pool",
    "PythonVersion",
    "experimental",
    "BotEventType",
    "Service",
    "PricingPolicy",
    "PricingPolicyCostModel",
    "schema",
    "SandboxFileSearchResult",
}

# Submodules: `from berth import integrations` imports it.
SUBMODULES = {"integrations"}


class Beta9NamesTest(unittest.TestCase):
    def test_every_name_is_there_or_listed_missing(self):
        for name in BETA9_NAMES:
            with self.subTest(name=name):
                if name in MISSING:
                    self.assertFalse(hasattr(berth, name), f"berth has {name}: move it out of MISSING and the doc")
                    with self.assertRaises(ImportError):
                        exec(f"from berth import {name}", {})
                elif name in SUBMODULES:
                    self.assertIsNotNone(importlib.import_module(f"berth.{name}"))
                else:
                    namespace: dict = {}
                    exec(f"from berth import {name}", namespace)
                    self.assertIsNotNone(namespace[name])


class SandboxObjectsTest(SandboxTestCase):
    """The sandbox classes beta9 exports are what berth's calls return."""

    def test_the_objects_calls_return(self):
        sb = Sandbox().create()
        self.assertIsInstance(sb, SandboxInstance)
        self.assertIsInstance(sb.process, SandboxProcessManager)
        self.assertIsInstance(sb.fs, SandboxFileSystem)
        p = sb.process.exec(PY, "-c", "print('x')")
        self.assertIsInstance(p, SandboxProcess)
        self.assertIsInstance(p.stdout, SandboxProcessStream)
        self.assertEqual(p.wait(), 0)
        self.assertIsInstance(sb.process.run_code("print(1)"), SandboxProcessResponse)
        root = self.fake.sandboxes[sb.container_id].root
        os.makedirs(os.path.join(root, "src"), exist_ok=True)
        with open(os.path.join(root, "src", "a.py"), "w") as f:
            f.write("# TODO here\n")
        [match] = sb.fs.find_in_files("/src", "TODO")
        self.assertIsInstance(match, SandboxFileSearchMatch)
        self.assertIsInstance(match.range, SandboxFileSearchRange)
        self.assertIsInstance(match.range.start, SandboxFilePosition)
        self.assertTrue(sb.terminate())


if __name__ == "__main__":
    unittest.main()
