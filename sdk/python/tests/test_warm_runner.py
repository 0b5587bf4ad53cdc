"""A pre-warmed runner (a real subprocess): it waits on its socket, then becomes the stub's runner."""

import base64
import json
import os
import pickle
import socket
import subprocess
import sys
import tempfile
import unittest

from tests.fake_bridge import SDK_DIR, FakeBridge, stop_runner

APP = """
import os
def whoami(x):
    return {"x": x, "secret": os.environ.get("MY_SECRET"), "cwd": os.getcwd(), "stub": os.environ.get("BERTH_STUB_ID")}
"""


class WarmRunnerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.code = os.path.join(self.dir.name, "code")
        os.mkdir(self.code)
        with open(os.path.join(self.code, "app.py"), "w") as f:
            f.write(APP)
        self.warm_path = os.path.join(self.dir.name, "warm.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.warm_path)
        self.listener.listen(1)
        self.listener.settimeout(60)
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-m", "berth.runtime.warm_runner"],
            cwd="/",
            env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SDK_DIR, "BERTH_REMOTE": "1", "BERTH_WARM_SOCKET": self.warm_path},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )

    def tearDown(self):
        stop_runner(self.proc)
        self.listener.close()
        self.dir.cleanup()

    def test_it_becomes_the_runner_it_is_given_to(self):
        conn, _ = self.listener.accept()  # connected: its imports are done
        self.assertIsNone(self.proc.poll())
        agent_sock = os.path.join(self.dir.name, "agent.sock")
        bridge = FakeBridge(agent_sock)
        try:
            env = {
                "PATH": os.environ.get("PATH", ""),
                "PYTHONPATH": os.pathsep.join([SDK_DIR, self.code]),
                "BERTH_REMOTE": "1",
                "BERTH_CONTAINER_ID": "ctr-warm",
                "BERTH_STUB_ID": "stub-warm",
                "BERTH_STUB_TYPE": "function",
                "BERTH_HANDLER": "app:whoami",
                "BERTH_AGENT_SOCKET": agent_sock,
                "MY_SECRET": "s3cret",
            }
            conn.sendall((json.dumps({"env": env, "cwd": self.code}) + "\n").encode())
            conn.close()
            bridge.add("t-warm", base64.b64encode(pickle.dumps(((5,), {}))).decode())
            r = bridge.wait_result("t-warm")
            self.assertEqual(r["status"], "COMPLETE", r)
            got = pickle.loads(base64.b64decode(r["result"]))
            self.assertEqual(got, {"x": 5, "secret": "s3cret", "cwd": os.path.realpath(self.code), "stub": "stub-warm"})
        finally:
            bridge.close()

    def test_an_agent_that_hangs_up_first_ends_it_having_run_nothing(self):
        conn, _ = self.listener.accept()
        conn.close()
        self.assertEqual(self.proc.wait(timeout=30), 0)


if __name__ == "__main__":
    unittest.main()
