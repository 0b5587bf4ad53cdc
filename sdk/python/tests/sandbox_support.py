"""A test case with a fake gateway serving the sandbox routes, the SDK pointed at it by BERTH_URL/SERVICE_TOKEN."""

import os
import sys
import tempfile
import threading
import unittest
from unittest import mock

from berth import Sandbox
from tests.fake_gateway import FakeGateway
from tests.fake_sandboxes import FakeSandboxes

PY = sys.executable


class SandboxTestCase(unittest.TestCase):
    """A fake gateway with the sandbox routes, and the SDK pointed at it through BERTH_URL/SERVICE_TOKEN."""

    @classmethod
    def setUpClass(cls):
        cls.gw = FakeGateway()
        cls.fake = FakeSandboxes(cls.gw)
        cls.tmp = tempfile.TemporaryDirectory()
        cls.env = mock.patch.dict(
            os.environ,
            {"BERTH_URL": cls.gw.url, "SERVICE_TOKEN": "bt_test", "BERTH_CONFIG": os.path.join(cls.tmp.name, "none.json")},
        )
        cls.env.start()

    @classmethod
    def tearDownClass(cls):
        cls.env.stop()
        cls.fake.close()
        cls.gw.close()
        cls.tmp.cleanup()

    def setUp(self):
        self.fake.output_limit = 1 << 20
        self.fake.criu = False

    def new(self, **options):
        sb = Sandbox(**options).create()
        self.addCleanup(lambda: sb.terminated or sb.terminate())
        return sb

    def watchdog(self, sb, pid):
        """Kills the process if the test hangs on it (a stream that never ends fails instead of blocking the suite)."""
        timer = threading.Timer(60, lambda: self.fake.sandboxes[sb.container_id].processes[pid].proc.kill())
        timer.daemon = True
        timer.start()
        self.addCleanup(timer.cancel)
