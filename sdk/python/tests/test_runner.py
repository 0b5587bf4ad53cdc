"""The in-container runner (a real subprocess) against a fake bridge on a unix socket."""

import base64
import json
import os
import pickle
import tempfile
import textwrap
import unittest

from tests.fake_bridge import FakeBridge, start_runner, stop_runner

APP = '''
import sys, threading, time
from berth import function

class Flaky(ValueError):
    pass

def setup():
    return "warmed"

@function(cpu=0.5)
def square(x):
    return x * x

def fail(kind):
    if kind == "flaky":
        raise Flaky("try again")
    raise KeyError(kind)

def chatty(n):
    print("hello", n)
    print("warn", n, file=sys.stderr)
    print("flushed", flush=True)
    return n

def unpicklable():
    return threading.Lock()

def huge():
    return b"x" * (5 * 1024 * 1024)

def with_context(x, context):
    return {"x": x, "task_id": context.task_id, "stub_id": context.stub_id, "container_id": context.container_id,
            "timeout": context.timeout, "on_start_value": context.on_start_value,
            "python_version": context.python_version, "stub_type": context.stub_type}

def slow(s):
    time.sleep(s)
    return s

barrier = threading.Barrier(3, timeout=15)

def rendezvous():
    barrier.wait()
    return True

class BadInit(Exception):
    def __init__(self, a, b):
        super().__init__(f"{a}-{b}")

def bad_init():
    raise BadInit(1, 2)
'''


def args(*a, **kw):
    return base64.b64encode(pickle.dumps((a, kw))).decode()


def value(result):
    return pickle.loads(base64.b64decode(result["result"]))


class RunnerCase(unittest.TestCase):
    handler = "app:square"
    env: dict = {}
    files = {"app.py": APP}

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        code = os.path.join(cls.dir.name, "code")
        os.mkdir(code)
        for name, text in cls.files.items():
            with open(os.path.join(code, name), "w") as f:
                f.write(textwrap.dedent(text))
        cls.sock = os.path.join(cls.dir.name, "agent.sock")
        cls.bridge = FakeBridge(cls.sock)
        cls.proc = start_runner(code, cls.sock, cls.handler, **cls.env)

    @classmethod
    def tearDownClass(cls):
        cls.log = stop_runner(cls.proc)
        cls.bridge.close()
        cls.dir.cleanup()

    def run_task(self, task_id, payload):
        self.bridge.add(task_id, payload)
        return self.bridge.wait_result(task_id)


class SquareTest(RunnerCase):
    env = {"BERTH_ON_START": "app:setup", "BERTH_RETRY_FOR": json.dumps(["Flaky"]), "BERTH_HEARTBEAT_INTERVAL_S": "0.05"}

    def test_success_with_json(self):
        r = self.run_task("t-ok", args(7))
        self.assertEqual(r["status"], "COMPLETE")
        self.assertEqual(value(r), 49)
        self.assertEqual(r["result_json"], "49")

    def test_tasks_run_one_after_another(self):
        for i in range(5):
            self.bridge.add(f"t-seq-{i}", args(i))
        self.assertEqual([value(self.bridge.wait_result(f"t-seq-{i}")) for i in range(5)], [i * i for i in range(5)])

    def test_unpicklable_arguments_fail_naming_the_cause(self):
        r = self.run_task("t-garbage", base64.b64encode(b"not a pickle").decode())
        self.assertEqual(r["status"], "FAILED")
        self.assertFalse(r["retry"])
        self.assertIn("cannot unpickle the arguments of task t-garbage", r["error"]["message"])

    def test_exception_is_reported_and_pickled(self):
        r = self.run_task("t-missing-arg", args())
        self.assertEqual(r["status"], "FAILED")
        self.assertEqual(r["error"]["type"], "TypeError")
        self.assertIn("square()", r["error"]["message"])
        self.assertIsInstance(pickle.loads(base64.b64decode(r["error"]["pickled"])), TypeError)
        self.assertFalse(r["retry"])


class FailuresTest(RunnerCase):
    handler = "app:fail"
    env = {"BERTH_RETRY_FOR": json.dumps(["Flaky"])}

    def test_retry_for_matches_a_base_class_name_too(self):
        r = self.run_task("t-flaky", args("flaky"))
        self.assertEqual(r["status"], "FAILED")
        self.assertTrue(r["retry"])
        self.assertEqual(r["error"]["type"], "app.Flaky")
        self.assertIn('raise Flaky("try again")', r["error"]["traceback"])
        self.assertNotIn("runner.py", r["error"]["traceback"])

    def test_other_exceptions_do_not_retry(self):
        r = self.run_task("t-key", args("boo"))
        self.assertEqual((r["status"], r["retry"], r["error"]["type"], r["error"]["message"]), ("FAILED", False, "KeyError", "'boo'"))
        self.assertEqual(repr(pickle.loads(base64.b64decode(r["error"]["pickled"]))), "KeyError('boo')")


class RetryByQualifiedNameTest(RunnerCase):
    handler = "app:fail"
    env = {"BERTH_RETRY_FOR": json.dumps(["builtins.LookupError"])}

    def test_module_qualified_base(self):
        r = self.run_task("t-lookup", args("x"))
        self.assertTrue(r["retry"])  # KeyError is a builtins.LookupError
        r2 = self.run_task("t-flaky", args("flaky"))
        self.assertFalse(r2["retry"])


class ResultsTest(RunnerCase):
    handler = "app:unpicklable"

    def test_unpicklable_result(self):
        r = self.run_task("t-lock", args())
        self.assertEqual(r["status"], "FAILED")
        self.assertFalse(r["retry"])
        self.assertIn("return value of unpicklable is not picklable", r["error"]["message"])


class HugeResultTest(RunnerCase):
    handler = "app:huge"

    def test_result_over_the_limit(self):
        r = self.run_task("t-huge", args())
        self.assertEqual(r["status"], "FAILED")
        self.assertIn("4 MiB", r["error"]["message"])
        self.assertIn(str(4 * 1024 * 1024), r["error"]["message"])


class ExceptionThatDoesNotUnpickleTest(RunnerCase):
    handler = "app:bad_init"

    def test_no_pickled_field(self):
        r = self.run_task("t-bad", args())
        self.assertEqual(r["error"]["type"], "app.BadInit")
        self.assertEqual(r["error"]["message"], "1-2")
        self.assertNotIn("pickled", r["error"])


class ImportFailureTest(RunnerCase):
    handler = "broken:fn"
    files = {"broken.py": "import not_a_module_anywhere\ndef fn():\n    return 1\n"}

    def test_every_task_fails_naming_the_import_error(self):
        for tid in ("t-a", "t-b"):
            r = self.run_task(tid, args())
            self.assertEqual(r["status"], "FAILED")
            self.assertFalse(r["retry"])
            self.assertIn("cannot import the handler broken:fn", r["error"]["message"])
            self.assertIn("not_a_module_anywhere", r["error"]["message"])


class RemoteCallAtImportTest(RunnerCase):
    handler = "eager:square"
    files = {
        "eager.py": "from berth import function\n@function\ndef square(x):\n    return x * x\nsquare.remote(2)\n"
    }

    def test_module_level_call_is_refused_with_advice(self):
        r = self.run_task("t-eager", args(3))
        self.assertEqual(r["status"], "FAILED")
        self.assertIn('if __name__ == "__main__":', r["error"]["message"])


class OutputTest(RunnerCase):
    handler = "app:chatty"

    def test_output_reaches_the_bridge_before_the_result(self):
        r = self.run_task("t-out", args(5))
        self.assertEqual(value(r), 5)
        self.assertEqual(self.bridge.output("t-out"), "hello 5\nflushed\n")
        self.assertEqual(self.bridge.output("t-out", "stderr"), "warn 5\n")
        kinds = self.bridge.kinds("t-out")
        self.assertEqual(kinds[-1], "result")
        self.assertIn("output", kinds)


class ContextTest(RunnerCase):
    handler = "app:with_context"
    env = {"BERTH_ON_START": "app:setup"}

    def test_context_is_injected(self):
        r = self.run_task("t-ctx", args(1))
        self.assertEqual(
            value(r),
            {
                "x": 1,
                "task_id": "t-ctx",
                "stub_id": "stub-test",
                "container_id": "ctr-test",
                "timeout": 60,
                "on_start_value": "warmed",
                "python_version": "3.11",
                "stub_type": "function",
            },
        )


class JsonPayloadTest(RunnerCase):
    """Tasks of a task queue POSTed to over HTTP, or a schedule tick: a JSON object bound like an endpoint body."""

    handler = "app:with_context"
    env = {"BERTH_ON_START": "app:setup"}

    def run_json(self, task_id, payload):
        self.bridge.add(task_id, base64.b64encode(payload).decode(), payload_format="json")
        return self.bridge.wait_result(task_id)

    def test_keys_become_arguments_and_context_is_given(self):
        r = self.run_json("t-json", json.dumps({"x": 5}).encode())
        self.assertEqual(r["status"], "COMPLETE", r)
        got = json.loads(r["result_json"])
        self.assertEqual((got["x"], got["task_id"], got["on_start_value"]), (5, "t-json", "warmed"))

    def test_keys_that_do_not_bind_fail_without_retry_naming_them(self):
        r = self.run_json("t-json-bad", json.dumps({"x": 1, "y": 2}).encode())
        self.assertEqual(r["status"], "FAILED")
        self.assertFalse(r["retry"])
        self.assertEqual(r["error"]["type"], "berth.HandlerArgumentsError")
        self.assertIn("does not accept the key 'y'", r["error"]["message"])

    def test_a_payload_that_is_not_an_object_fails(self):
        r = self.run_json("t-json-list", b"[1, 2]")
        self.assertEqual((r["status"], r["retry"]), ("FAILED", False))
        self.assertIn("must be a JSON object", r["error"]["message"])

    def test_a_payload_that_does_not_parse_fails(self):
        r = self.run_json("t-json-garbled", b"\x80\x04 not json")
        self.assertEqual((r["status"], r["retry"]), ("FAILED", False))
        self.assertIn("does not parse", r["error"]["message"])


class HeartbeatTest(RunnerCase):
    handler = "app:slow"
    env = {"BERTH_HEARTBEAT_INTERVAL_S": "0.05", "BERTH_WORKERS": "2"}

    def test_heartbeats_while_running_and_stop_on_410(self):
        self.bridge.cancelled.add("t-cancelled")
        self.bridge.add("t-slow", args(0.5))
        self.bridge.add("t-cancelled", args(0.5))
        self.assertEqual(value(self.bridge.wait_result("t-slow")), 0.5)
        self.bridge.wait_result("t-cancelled")
        self.assertGreaterEqual(self.bridge.kinds("t-slow").count("heartbeat"), 2)
        # One heartbeat answered 410, then none.
        self.assertEqual(self.bridge.kinds("t-cancelled").count("heartbeat"), 1)


class SequentialHeartbeatTest(RunnerCase):
    handler = "app:slow"
    env = {"BERTH_HEARTBEAT_INTERVAL_S": "0.05", "BERTH_WORKERS": "1"}

    def test_each_task_of_a_worker_gets_heartbeats(self):
        # One heartbeat thread serves the worker's tasks one after another.
        self.bridge.add("t-first", args(0.3))
        self.assertEqual(value(self.bridge.wait_result("t-first")), 0.3)
        self.bridge.add("t-second", args(0.3))
        self.assertEqual(value(self.bridge.wait_result("t-second")), 0.3)
        self.assertGreaterEqual(self.bridge.kinds("t-first").count("heartbeat"), 2)
        self.assertGreaterEqual(self.bridge.kinds("t-second").count("heartbeat"), 2)


class WorkersTest(RunnerCase):
    handler = "app:rendezvous"
    env = {"BERTH_WORKERS": "3"}

    def test_three_workers_run_three_tasks_at_once(self):
        for i in range(3):
            self.bridge.add(f"t-par-{i}", args())
        # Each task waits for the other two: this only completes with three tasks running together.
        self.assertEqual([value(self.bridge.wait_result(f"t-par-{i}")) for i in range(3)], [True] * 3)


class BatchTest(RunnerCase):
    handler = "app:slow"

    def test_short_tasks_are_asked_for_in_growing_batches(self):
        for i in range(60):
            self.bridge.add(f"t-batch-{i}", args(0))
        for i in range(60):
            r = self.bridge.wait_result(f"t-batch-{i}")
            self.assertEqual(r["status"], "COMPLETE")
            self.assertIsInstance(r["started_at"], int)
        with self.bridge.cond:
            asks = list(self.bridge.asks)
        self.assertGreater(max(asks), 1, f"asks: {asks}")

    def test_a_long_task_gives_the_unstarted_rest_of_its_batch_back(self):
        # Grow the batch size with short tasks first.
        for i in range(30):
            self.bridge.add(f"t-warm-{i}", args(0))
        self.bridge.wait_result("t-warm-29")
        with self.bridge.cond:
            self.assertGreater(self.bridge.asks[-1], 3, f"asks: {self.bridge.asks}")
        # Queued together, the next ask takes all four: the first runs 0.6 s, the rest must be released.
        self.bridge.add_many((f"t-mixed-{i}", args(s)) for i, s in enumerate([0.6, 0, 0, 0]))
        self.assertEqual(value(self.bridge.wait_result("t-mixed-0")), 0.6)
        with self.bridge.cond:
            released = list(self.bridge.released)
            ran = set(self.bridge.results)
        self.assertEqual(released, ["t-mixed-1", "t-mixed-2", "t-mixed-3"])
        self.assertFalse({"t-mixed-1", "t-mixed-2", "t-mixed-3"} & ran)
        with self.bridge.cond:
            # After a released batch the worker asks for one task at a time again.
            self.assertEqual(self.bridge.asks[-1], 1)


class LifecycleTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(self.dir.name, "app.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        self.sock = os.path.join(self.dir.name, "agent.sock")

    def tearDown(self):
        self.dir.cleanup()

    def test_exits_0_when_the_agent_takes_no_more_tasks(self):
        bridge = FakeBridge(self.sock)
        bridge.closed = True
        proc = start_runner(self.dir.name, self.sock, "app:square")
        try:
            self.assertEqual(proc.wait(timeout=30), 0)
        finally:
            log = stop_runner(proc)
            bridge.close()
        self.assertIn("takes no more tasks", log)

    def test_exits_1_when_the_agent_is_gone(self):
        proc = start_runner(self.dir.name, self.sock, "app:square", BERTH_AGENT_GONE_AFTER_S="0.3")
        try:
            self.assertEqual(proc.wait(timeout=30), 1)
        finally:
            log = stop_runner(proc)
        self.assertIn("has not answered", log)


if __name__ == "__main__":
    unittest.main()
