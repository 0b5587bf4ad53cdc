"""The handler string and the synced directory of a function."""

import importlib
import os
import subprocess
import sys
import tempfile
import unittest

from berth import BerthError
from berth.api.locate import locate
from tests.fake_bridge import SDK_DIR


class LocateTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.realpath(self.tmp.name)
        os.makedirs(os.path.join(self.root, "lpkg", "sub"))
        for rel, text in {
            "lpkg/__init__.py": "def top():\n    pass\n",
            "lpkg/sub/__init__.py": "",
            "lpkg/sub/mod.py": "from berth import function\n@function\ndef f():\n    pass\n",
            "lplain.py": "def g():\n    pass\ndef outer():\n    def inner():\n        pass\n    return inner\n",
            "app.py": "from berth import function\n@function\ndef square(x):\n    return x * x\n"
            "if __name__ == '__main__':\n    print(square.location())\n",
        }.items():
            with open(os.path.join(self.root, rel), "w") as f:
                f.write(text)
        sys.path.insert(0, self.root)

    def tearDown(self):
        sys.path.remove(self.root)
        for m in ("lpkg", "lpkg.sub", "lpkg.sub.mod", "lplain"):
            sys.modules.pop(m, None)
        self.tmp.cleanup()

    def test_package_module_syncs_the_top_packages_parent(self):
        mod = importlib.import_module("lpkg.sub.mod")
        loc = mod.f.location()
        self.assertEqual((loc.root, loc.handler), (self.root, "lpkg.sub.mod:f"))
        top = locate(importlib.import_module("lpkg").top)
        self.assertEqual((top.root, top.handler), (self.root, "lpkg:top"))

    def test_plain_module(self):
        loc = locate(importlib.import_module("lplain").g)
        self.assertEqual((loc.root, loc.handler), (self.root, "lplain:g"))

    def test_nested_functions_are_refused(self):
        with self.assertRaises(BerthError) as ctx:
            locate(importlib.import_module("lplain").outer())
        self.assertIn("top level", str(ctx.exception))

    def test_script_is_named_by_its_file(self):
        out = subprocess.run(
            [sys.executable, "app.py"], cwd=self.root, env={**os.environ, "PYTHONPATH": SDK_DIR},
            capture_output=True, text=True, timeout=60,
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("module='app', qualname='square'", out.stdout)
        self.assertIn(f"root='{self.root}'", out.stdout)


if __name__ == "__main__":
    unittest.main()
