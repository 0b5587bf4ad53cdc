"""Pickling: the script's own classes come back as the caller's, not as a re-imported copy."""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

from tests.fake_bridge import SDK_DIR

SCRIPT = """
import pickle
from berth import serialize

class Flaky(Exception):
    pass

if __name__ == "__main__":
    import app  # as the container imports the script: classes named app.Flaky
    data = pickle.dumps(app.Flaky("again"))
    assert b"app" in data and b"__main__" not in data
    e = serialize.loads(data)
    print(type(e) is Flaky, str(e))
    try:
        raise e
    except Flaky:
        print("caught")
"""


class MainAliasTest(unittest.TestCase):
    def test_remote_class_of_the_script_is_the_callers_class(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "app.py"), "w") as f:
                f.write(textwrap.dedent(SCRIPT))
            env = {**os.environ, "PYTHONPATH": SDK_DIR}
            env.pop("BERTH_REMOTE", None)
            out = subprocess.run(
                [sys.executable, "app.py"], cwd=d, env=env, capture_output=True, text=True, timeout=60
            )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split("\n")[:2], ["True again", "caught"])


if __name__ == "__main__":
    unittest.main()
