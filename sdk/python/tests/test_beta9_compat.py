"""beta9's calling conventions (docs/compatibility.md) against the fake gateway on 127.0.0.1."""

import importlib
import json
import os
import stat
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

import berth
from berth import Context, Sandbox
from berth.runtime.realtime_app import realtime_asgi
from tests.asgi_support import ServerThread, WebSocketClient
from tests.fake_gateway import FakeGateway

# A program as beta9's examples write it, with only the import renamed.
APP = '''
from berth import endpoint, function, task_queue

@function(cpu="100m", memory="100Mi")
def handler(x=2):
    return x * 10

@task_queue(cpu="500m", memory="1Gi")
def jobs(n):
    return n

@endpoint(name="predict", cpu=0.5)
def predict(**inputs):
    return inputs
'''


class Beta9ConventionsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = FakeGateway()
        cls.gw.behaviours["handler"] = lambda x=2: ([], "COMPLETE", x * 10 + 1)  # +1: proves it ran "remotely"
        cls.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(cls.dir.name, "b9_app.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        cls.env = mock.patch.dict(
            os.environ,
            {"BERTH_URL": cls.gw.url, "SERVICE_TOKEN": "bt_test", "BERTH_CONFIG": os.path.join(cls.dir.name, "none.json")},
        )
        cls.env.start()
        os.environ.pop("BERTH_REMOTE", None)
        sys.path.insert(0, cls.dir.name)
        cls.app = importlib.import_module("b9_app")

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.dir.name)
        sys.modules.pop("b9_app", None)
        cls.env.stop()
        cls.gw.close()
        cls.dir.cleanup()

    def test_cpu_and_memory_strings(self):
        h = self.app.handler
        self.assertEqual((h.cpu_millicores, h.memory), (100, 100))
        self.assertEqual((self.app.jobs.cpu_millicores, self.app.jobs.memory), (500, 1024))
        self.assertEqual(self.app.handler.stub_extra()["cpu_millicores"], 100)

    def test_a_direct_call_from_outside_a_container_runs_remotely(self):
        self.assertEqual(self.app.handler(3), 31, "ran through the gateway")
        self.assertTrue(any(b["name"] == "handler" for b in self.gw.stub_bodies))

    def test_inside_a_container_a_direct_call_is_local(self):
        with mock.patch.dict(os.environ, {"BERTH_REMOTE": "1"}):
            self.assertEqual(self.app.handler(3), 30)

    def test_local_runs_here(self):
        before = len(self.gw.stub_bodies)
        self.assertEqual(self.app.handler.local(4), 40)
        self.assertEqual(len(self.gw.stub_bodies), before, "nothing registered")

    def test_put_returns_a_task_with_an_id_that_is_also_the_id_string(self):
        task = self.app.jobs.put(5)
        self.assertIsInstance(task, str)
        self.assertEqual(task.id, str(task))
        self.assertTrue(task.id.startswith("task-"))
        self.assertEqual(task, task.id, "compares equal to the id, as berth's earlier answer")
        self.assertEqual(task.status, "PENDING", "read through the task status API")
        self.assertEqual(json.loads(json.dumps({"id": task})), {"id": task.id})

    def test_endpoint_called_directly_runs_here(self):
        self.assertEqual(self.app.predict(a=1), {"a": 1})

    def test_serve_runs_berth_serve_on_the_object(self):
        record = os.path.join(self.dir.name, "argv.json")
        cli = os.path.join(self.dir.name, "berth-cli")
        with open(cli, "w") as f:
            f.write(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({record!r}, 'w'))\nsys.exit(3)\n")
        os.chmod(cli, os.stat(cli).st_mode | stat.S_IXUSR)
        with mock.patch.dict(os.environ, {"BERTH_CLI": cli}):
            self.assertEqual(self.app.predict.serve(timeout=30), 3, "the CLI's exit status")
        with open(record) as f:
            argv = json.load(f)
        target = os.path.join(self.dir.name, "b9_app.py") + ":predict"
        self.assertEqual(argv, ["serve", target, "--name", "predict", "--idle-timeout", "30"])

    def test_serve_without_the_cli_names_it(self):
        with mock.patch.dict(os.environ, {"BERTH_CLI": "", "PATH": self.dir.name}):
            with self.assertRaises(berth.BerthError) as ctx:
                self.app.predict.serve()
        self.assertIn("berth serve", str(ctx.exception))


class SandboxKeepWarmTest(unittest.TestCase):
    def test_keep_warm_seconds_is_the_ttl(self):
        self.assertEqual(Sandbox(keep_warm_seconds=30, token="t", url="http://127.0.0.1:9").ttl_seconds, 30)
        self.assertEqual(Sandbox(keep_warm_seconds=-1, token="t", url="http://127.0.0.1:9").ttl_seconds, -1)

    def test_both_names_with_different_values_are_refused(self):
        with self.assertRaises(ValueError) as ctx:
            Sandbox(keep_warm_seconds=30, ttl_seconds=60, token="t", url="http://127.0.0.1:9")
        self.assertIn("keep_warm_seconds", str(ctx.exception))
        with self.assertRaises(ValueError):
            Sandbox(keep_warm_seconds=0, token="t", url="http://127.0.0.1:9")


def context_first(context, data):
    return {"got": data, "stub": context.stub_id}


def data_first(data, context):
    return {"got": data, "stub": context.stub_id}


class RealtimeArgumentOrderTest(unittest.TestCase):
    def roundtrip(self, handler):
        server = ServerThread(realtime_asgi(handler, context=Context(stub_id="stub-rt")))
        self.addCleanup(server.stop)
        ws = WebSocketClient(server.address, "/")
        self.addCleanup(ws.shut)
        ws.send_text('{"n": 1}')
        return json.loads(ws.recv())

    def test_beta9_order_context_then_data(self):
        self.assertEqual(self.roundtrip(context_first), {"got": {"n": 1}, "stub": "stub-rt"})

    def test_berth_order_data_then_context(self):
        self.assertEqual(self.roundtrip(data_first), {"got": {"n": 1}, "stub": "stub-rt"})


if __name__ == "__main__":
    unittest.main()
