"""@function's .remote() and .map() against a fake gateway on 127.0.0.1."""

import contextlib
import importlib
import io
import os
import sys
import tempfile
import textwrap
import threading
import time
import unittest
from unittest import mock

import berth
from berth import env
from berth.client import invoke
from tests.fake_gateway import FakeGateway

APP = '''
import threading
from berth import Image, TaskPolicy, function

@function(cpu=0.25, memory="256Mi", retry_for=[ValueError], keep_warm_seconds=30)
def square(x):
    return x * x

@function(name="chatty")
def chatty(x):
    return x

@function(name="boom")
def boom(x):
    raise KeyError(x)

@function(name="opaque")
def opaque():
    pass

@function(name="slow", task_policy=TaskPolicy(max_retries=1, timeout=2, expires=30))
def slow():
    pass

@function(name="first")
def first(x):
    return x

@function(name="fails_at")
def fails_at(x):
    return x

@function(name="refused")
def refused():
    pass

@function(name="stream_error")
def stream_error():
    pass

@function(name="dies_mid_stream")
def dies_mid_stream(x):
    return x * x

@function(name="registry", image=Image.from_registry("docker.io/library/python:3.11-slim"), gpu=["H100", "A100"])
def registry(x):
    return x
'''


def wait_for(predicate, what, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class FunctionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = FakeGateway()
        g = cls.gw.behaviours
        g["square"] = lambda x: ([], "COMPLETE", x * x)
        g["chatty"] = lambda x: ([("stdout", f"out {x}\n"), ("stderr", f"err {x}\n")], "COMPLETE", x)
        g["boom"] = lambda x: ([], "FAILED", KeyError(x))
        g["opaque"] = lambda: ([], "FAILED", {"type": "app.Secret", "message": "hidden", "traceback": "Traceback: remote\n"})
        g["first"] = lambda x: ([], "COMPLETE", x)
        g["fails_at"] = lambda x: ([], "FAILED", ValueError(f"bad {x}")) if x in (5, 8) else ([], "COMPLETE", x)
        g["registry"] = lambda x: ([], "COMPLETE", x)
        g["dies_mid_stream"] = lambda x: ([], "COMPLETE", x * x)
        cls.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(cls.dir.name, "app_fn.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        with open(os.path.join(cls.dir.name, "data.bin"), "wb") as f:
            f.write(b"ignored")
        with open(os.path.join(cls.dir.name, ".berthignore"), "w") as f:
            f.write("data.bin\n")
        cls.env = mock.patch.dict(
            os.environ,
            {"BERTH_URL": cls.gw.url, "SERVICE_TOKEN": "bt_test", "BERTH_CONFIG": os.path.join(cls.dir.name, "none.json")},
        )
        cls.env.start()
        sys.path.insert(0, cls.dir.name)
        cls.app = importlib.import_module("app_fn")

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.dir.name)
        sys.modules.pop("app_fn", None)
        cls.env.stop()
        cls.gw.close()
        cls.dir.cleanup()

    def set_slow_results(self, behaviour, statuses):
        self.gw.behaviours["slow"] = lambda: ([], statuses, behaviour)

    def test_remote_returns_the_value_and_syncs_once(self):
        self.assertEqual(self.app.square.remote(7), 49)
        self.assertEqual(self.app.square.remote(8), 64)
        bodies = [b for b in self.gw.stub_bodies if b["name"] == "square"]
        self.assertEqual(len(bodies), 1, "the stub is created once per process")
        self.assertEqual(len(set(self.gw.puts)), len(self.gw.puts), "nothing uploaded twice")
        body = bodies[0]
        sha = body["extra"]["code_sha256"]
        self.assertIn(sha, self.gw.objects)
        self.assertEqual(
            body["config"],
            {
                "runtime": {"cpu": 1, "gpu": "", "memory": 256, "image_id": berth.Image().image_id},
                "handler": "app_fn:square",
                "on_start": "",
                "python_version": "3.8",
                "keep_warm_seconds": 30,
                "max_pending_tasks": 100,
                "callback_url": "",
                "task_policy": {"max_retries": 3, "timeout": 3600, "expires": ""},
                "workers": 1,
                "authorized": False,
                "volumes": None,
                "autoscaler": {"type": "queue_depth", "max_containers": 1, "tasks_per_container": 1},
            },
        )
        self.assertEqual(
            body["extra"],
            {
                "cpu_millicores": 250,
                "gpu_types": [],
                "gpu_count": 0,
                "retry_for": ["ValueError"],
                "image_ref": "",
                "code_sha256": sha,
                "secrets": [],
                "headless": False,
            },
        )
        self.assertEqual(body["type"], "function")

    def test_archive_honours_berthignore(self):
        self.app.square.remote(1)
        from tests.test_sync import names_in

        names = names_in(self.gw.objects[self.gw.stub_bodies[0]["extra"]["code_sha256"]])
        self.assertIn("app_fn.py", names)
        self.assertNotIn("data.bin", names)

    def test_registry_image_and_gpu_list(self):
        self.assertEqual(self.app.registry.remote(3), 3)
        body = [b for b in self.gw.stub_bodies if b["name"] == "registry"][0]
        self.assertEqual(body["extra"]["image_ref"], "docker.io/library/python:3.11-slim")
        self.assertEqual((body["extra"]["gpu_types"], body["extra"]["gpu_count"]), (["H100", "A100"], 1))
        self.assertEqual(body["config"]["runtime"]["gpu"], "H100,A100")

    def test_task_policy_overrides_timeout_and_retries(self):
        self.set_slow_results({"type": "Timeout", "message": "ran past 2 s"}, "TIMEOUT")
        with self.assertRaises(berth.TaskTimeoutError) as ctx:
            self.app.slow.remote()
        self.assertTrue(ctx.exception.task_id.startswith("task-"))
        self.assertEqual(ctx.exception.status, "TIMEOUT")
        self.assertIn("ran past 2 s", str(ctx.exception))
        policy = [b for b in self.gw.stub_bodies if b["name"] == "slow"][0]["config"]["task_policy"]
        self.assertEqual(policy, {"max_retries": 1, "timeout": 2, "expires": "30"})

    def test_cancelled_and_expired(self):
        for status, cls in (("CANCELLED", berth.TaskCancelledError), ("EXPIRED", berth.TaskExpiredError)):
            self.set_slow_results({"type": status, "message": "gone"}, status)
            with self.assertRaises(cls) as ctx:
                self.app.slow.remote()
            self.assertIsInstance(ctx.exception, berth.TaskError)
            self.assertEqual(ctx.exception.status, status)

    def test_output_is_printed_to_the_callers_streams(self):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            self.assertEqual(self.app.chatty.remote(3), 3)
        self.assertEqual((out.getvalue(), err.getvalue()), ("out 3\n", "err 3\n"))

    def test_remote_exception_is_raised_with_its_traceback(self):
        with self.assertRaises(KeyError) as ctx:
            self.app.boom.remote("boo")
        self.assertEqual(repr(ctx.exception), "KeyError('boo')")
        self.assertIsInstance(ctx.exception.__cause__, berth.RemoteTraceback)
        self.assertIn("Traceback", str(ctx.exception.__cause__))

    def test_exception_that_does_not_unpickle_is_a_remote_error(self):
        with self.assertRaises(berth.RemoteError) as ctx:
            self.app.opaque.remote()
        e = ctx.exception
        self.assertEqual((e.type, e.message, e.status), ("app.Secret", "hidden", "FAILED"))
        self.assertIn("Traceback: remote", e.traceback)

    def test_gateway_refusal_and_stream_error_are_berth_errors(self):
        with self.assertRaises(berth.BerthError) as ctx:
            self.app.refused.remote()
        self.assertEqual(ctx.exception.code, "invalid_request")
        with self.assertRaises(berth.BerthError) as ctx:
            self.app.stream_error.remote()
        self.assertEqual((ctx.exception.code, ctx.exception.message), ("resource_exhausted", "queue full"))

    def test_unpicklable_argument_is_named(self):
        before = len(self.gw.submissions)
        with self.assertRaises(berth.SerializationError) as ctx:
            self.app.square.remote(1, threading.Lock())
        self.assertIn("argument 1", str(ctx.exception))
        self.assertIn("lock", str(ctx.exception).lower())
        self.assertEqual(len(self.gw.submissions), before)

    def test_argument_over_4_mib(self):
        with self.assertRaises(berth.ArgumentsTooLargeError) as ctx:
            self.app.square.remote(b"x" * (5 * 1024 * 1024))
        self.assertIn("4 MiB", str(ctx.exception))
        self.assertGreater(ctx.exception.size, 5 * 1024 * 1024)
        self.assertIn(str(ctx.exception.size), str(ctx.exception))

    def test_calls_during_the_runners_import_are_refused(self):
        with mock.patch.dict(os.environ, {"BERTH_REMOTE": "1"}):
            env.set_importing(True)
            try:
                with self.assertRaises(berth.RemoteCallError) as ctx:
                    self.app.square.remote(1)
                self.assertIn('if __name__ == "__main__":', str(ctx.exception))
                with self.assertRaises(berth.RemoteCallError):
                    self.app.square.map([1])
            finally:
                env.set_importing(False)
            self.assertTrue(env.is_remote())

    def test_map_of_10000_in_order_in_chunks(self):
        self.app.square.remote(0)  # stub and code in place
        before = len(self.gw.submissions)
        conns = set(self.gw.connections)
        out = list(self.app.square.map(range(10000)))
        self.assertEqual(out, [x * x for x in range(10000)])
        chunks = self.gw.submissions[before:]
        self.assertEqual([n for _, n, _ in chunks], [1000] * 10)
        self.assertLessEqual(len(self.gw.connections - conns), 4, "a few kept-alive connections, not one per chunk")

    def test_map_chunks_stay_under_the_request_size(self):
        before = len(self.gw.submissions)
        with mock.patch.object(invoke, "MAX_CHUNK_BYTES", 200):
            self.assertEqual(list(self.app.first.map(["x" * 50] * 10)), ["x" * 50] * 10)
        sizes = [n for _, n, _ in self.gw.submissions[before:]]
        self.assertGreater(len(sizes), 1)
        self.assertEqual(sum(sizes), 10)

    def test_map_and_remote_ask_by_id_when_the_coordinator_dies_mid_stream(self):
        # Behind a load balancer another coordinator answers for tasks the dead one named.
        self.assertEqual(list(self.app.dies_mid_stream.map(range(10))), [x * x for x in range(10)])
        self.assertEqual(self.app.dies_mid_stream.remote(7), 49)

    def test_map_item_is_one_argument(self):
        self.assertEqual(list(self.app.first.map([(1, 2), (3, 4)])), [(1, 2), (3, 4)])

    def test_map_raises_the_first_failure_in_order(self):
        got = []
        with self.assertRaises(ValueError) as ctx:
            for v in self.app.fails_at.map(range(10)):
                got.append(v)
        self.assertEqual(got, [0, 1, 2, 3, 4])
        self.assertEqual(str(ctx.exception), "bad 5")

    def test_map_unpicklable_item_fails_in_order(self):
        got = []
        with self.assertRaises(berth.SerializationError) as ctx:
            for v in self.app.first.map([1, 2, threading.Lock(), 4]):
                got.append(v)
        self.assertEqual(got, [1, 2])
        self.assertIn("item 2", str(ctx.exception))

    def test_map_closed_early_closes_its_stream(self):
        self.gw.reverse = False
        self.gw.result_delay_s = 0.02
        try:
            closed = self.gw.closed_streams
            gen = self.app.first.map(range(200))
            self.assertEqual([next(gen) for _ in range(3)], [0, 1, 2])
            gen.close()
            wait_for(lambda: self.gw.closed_streams > closed, "the gateway to see the stream closed")
        finally:
            self.gw.reverse = True
            self.gw.result_delay_s = 0.0


if __name__ == "__main__":
    unittest.main()
