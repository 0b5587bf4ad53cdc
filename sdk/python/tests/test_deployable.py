"""The deployment decorators' stub config and extra, their validation, QueueDepthAutoscaler, TaskQueue.put."""

import importlib
import os
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

import berth
from berth import (
    ASGI,
    Endpoint,
    Function,
    QueueDepthAutoscaler,
    Realtime,
    Schedule,
    TaskQueue,
    asgi,
    endpoint,
    env,
    realtime,
    schedule,
    task_queue,
)
from berth.runtime.runner import resolve
from tests.fake_gateway import FakeGateway

APP = '''
from berth import Image, QueueDepthAutoscaler, TaskPolicy, asgi, endpoint, realtime, schedule, task_queue

def warm_up():
    return "model"

@endpoint
def predict(x, context, y=2):
    return {"sum": x + y}

@endpoint(
    name="tuned",
    cpu=0.5,
    memory="1Gi",
    gpu=["H100", "A100"],
    image=Image.from_registry("docker.io/library/python:3.11-slim"),
    timeout=30,
    callback_url="http://hooks.example/done",
    secrets=["HF_TOKEN"],
    workers=2,
    concurrent_requests=4,
    keep_warm_seconds=60,
    max_pending_tasks=7,
    on_start=warm_up,
    authorized=False,
    autoscaler=QueueDepthAutoscaler(min_containers=1, max_containers=3, max_tasks_per_container=5),
)
def tuned(**inputs):
    return inputs

@asgi(workers=2)
def web():
    return None

@realtime
def echo(context, message):
    return message

@task_queue(retries=1, retry_for=[KeyError])
def work(n, scale=1):
    return n * scale

@task_queue(task_policy=TaskPolicy(max_retries=5, timeout=20, expires=60))
def refused(n):
    return n

@schedule(when="*/5  *  * * *", timeout=60)
def nightly(context=None):
    return "ran"
'''


def plain(x):
    return x


class DeployableStubTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = FakeGateway()
        cls.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(cls.dir.name, "app_deploy.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        cls.env = mock.patch.dict(
            os.environ,
            {"BERTH_URL": cls.gw.url, "SERVICE_TOKEN": "bt_test", "BERTH_CONFIG": os.path.join(cls.dir.name, "none.json")},
        )
        cls.env.start()
        sys.path.insert(0, cls.dir.name)
        cls.app = importlib.import_module("app_deploy")

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.dir.name)
        sys.modules.pop("app_deploy", None)
        cls.env.stop()
        cls.gw.close()
        cls.dir.cleanup()

    def test_endpoint_defaults(self):
        e = self.app.predict
        self.assertIsInstance(e, Endpoint)
        self.assertEqual((e.stub_type, e.stub_name), ("endpoint", "predict"))
        self.assertEqual(
            e.stub_config(),
            {
                "runtime": {"cpu": 1, "gpu": "", "memory": 128, "image_id": berth.Image().image_id},
                "handler": "app_deploy:predict",
                "on_start": "",
                "python_version": berth.Image().python_version,
                "keep_warm_seconds": 180,
                "max_pending_tasks": 100,
                "callback_url": "",
                "task_policy": {"max_retries": 0, "timeout": 180, "expires": "180"},
                "workers": 1,
                "authorized": True,
                "volumes": None,
                "autoscaler": {"type": "queue_depth", "max_containers": 1, "tasks_per_container": 0},
            },
        )
        self.assertEqual(
            e.stub_extra("ab" * 32),
            {
                "cpu_millicores": 1000,
                "gpu_types": [],
                "gpu_count": 0,
                "retry_for": [],
                "image_ref": "",
                "code_sha256": "ab" * 32,
                "secrets": [],
                "headless": False,
                "min_containers": 0,
                "concurrent_requests": 1,
                "handler_params": {"names": ["x", "y"], "required": ["x"], "var_keyword": False, "context": True},
            },
        )
        self.assertEqual(e(1, None), {"sum": 3}, "calling it runs it here")
        self.assertEqual(e.__name__, "predict")

    def test_endpoint_with_every_option(self):
        t = self.app.tuned
        config, extra = t.stub_config(), t.stub_extra()
        self.assertEqual(config["runtime"], {"cpu": 1, "gpu": "H100,A100", "memory": 1024, "image_id": t.image.image_id})
        self.assertEqual(config["on_start"], "app_deploy:warm_up")
        self.assertEqual(
            {k: config[k] for k in ("keep_warm_seconds", "max_pending_tasks", "callback_url", "workers", "authorized")},
            {
                "keep_warm_seconds": 60,
                "max_pending_tasks": 7,
                "callback_url": "http://hooks.example/done",
                "workers": 2,
                "authorized": False,
            },
        )
        self.assertEqual(config["task_policy"], {"max_retries": 0, "timeout": 30, "expires": "180"})
        self.assertEqual(config["autoscaler"], {"type": "queue_depth", "max_containers": 3, "tasks_per_container": 5})
        self.assertEqual(t.stub_name, "tuned")
        self.assertEqual(
            (extra["min_containers"], extra["concurrent_requests"], extra["secrets"], extra["cpu_millicores"]),
            (1, 4, ["HF_TOKEN"], 500),
        )
        self.assertEqual((extra["gpu_types"], extra["gpu_count"]), (["H100", "A100"], 1))
        self.assertEqual(extra["image_ref"], "docker.io/library/python:3.11-slim")
        self.assertEqual(extra["handler_params"], {"names": [], "required": [], "var_keyword": True, "context": False})

    def test_asgi_realtime_schedule(self):
        web, echo, nightly = self.app.web, self.app.echo, self.app.nightly
        self.assertIsInstance(web, ASGI)
        self.assertEqual((web.stub_type, web.stub_config()["workers"], web.stub_config()["keep_warm_seconds"]), ("asgi", 2, 180))
        self.assertNotIn("handler_params", web.stub_extra())
        self.assertEqual(web.stub_config()["task_policy"], {"max_retries": 0, "timeout": 3600, "expires": ""})

        self.assertIsInstance(echo, Realtime)
        cfg = echo.stub_config()
        self.assertEqual((echo.stub_type, cfg["keep_warm_seconds"], cfg["task_policy"]["timeout"]), ("realtime", 10, 3600))
        self.assertEqual((cfg["authorized"], cfg["max_pending_tasks"], cfg["workers"]), (True, 100, 1))
        self.assertEqual(echo.stub_extra()["handler_params"]["names"], ["message"])

        self.assertIsInstance(nightly, Schedule)
        cfg, extra = nightly.stub_config(), nightly.stub_extra()
        self.assertEqual(nightly.stub_type, "schedule")
        self.assertEqual(extra["when"], "*/5 * * * *", "whitespace normalized")
        self.assertEqual((cfg["keep_warm_seconds"], cfg["task_policy"]), (10, {"max_retries": 3, "timeout": 60, "expires": ""}))
        self.assertEqual(nightly(), "ran")

    def test_task_queue_put_registers_once_and_enqueues(self):
        work = self.app.work
        self.assertIsInstance(work, TaskQueue)
        self.assertEqual(work.stub_config()["task_policy"], {"max_retries": 1, "timeout": 3600, "expires": ""})
        self.assertEqual(work.stub_extra()["retry_for"], ["KeyError"])
        first = work.put(3, scale=2)
        second = work.put(4)
        self.assertNotEqual(first, second)
        bodies = [b for b in self.gw.stub_bodies if b["name"] == "work"]
        self.assertEqual(len(bodies), 1, "the stub is registered once per process")
        self.assertEqual(bodies[0]["type"], "taskqueue")
        self.assertEqual(bodies[0]["config"]["handler"], "app_deploy:work")
        self.assertIn(bodies[0]["extra"]["code_sha256"], self.gw.objects)
        self.assertEqual(
            [e for e in self.gw.enqueued if e[0] == "stub-work"],
            [("stub-work", first, (3,), {"scale": 2}), ("stub-work", second, (4,), {})],
        )
        self.assertEqual(work(3, scale=2), 6)

    def test_task_policy_of_a_task_queue(self):
        policy = self.app.refused.stub_config()["task_policy"]
        self.assertEqual(policy, {"max_retries": 5, "timeout": 20, "expires": "60"})

    def test_put_refused_by_the_gateway_is_a_berth_error(self):
        with self.assertRaises(berth.BerthError) as ctx:
            self.app.refused.put(1)
        self.assertEqual(ctx.exception.code, "invalid_request")

    def test_put_of_unpicklable_argument(self):
        import threading

        with self.assertRaises(berth.SerializationError) as ctx:
            self.app.work.put(threading.Lock())
        self.assertIn("argument 0", str(ctx.exception))

    def test_put_while_the_runner_imports_is_refused(self):
        with mock.patch.dict(os.environ, {"BERTH_REMOTE": "1"}):
            env.set_importing(True)
            try:
                with self.assertRaises(berth.RemoteCallError):
                    self.app.work.put(1)
            finally:
                env.set_importing(False)

    def test_remote_and_map_say_how_to_call_it(self):
        for obj, words in ((self.app.predict, "berth deploy"), (self.app.work, ".put("), (self.app.nightly, "schedule")):
            with self.assertRaises(TypeError) as ctx:
                obj.remote(1)
            self.assertIn(words, str(ctx.exception))
            with self.assertRaises(TypeError):
                obj.map([1])

    def test_the_runner_resolves_the_decorated_object_to_its_function(self):
        self.assertIs(resolve("app_deploy:predict", "BERTH_HANDLER"), self.app.predict.func)
        self.assertIsInstance(self.app.predict, Function)


class DecoratorValidationTest(unittest.TestCase):
    def test_bare_and_called(self):
        for deco, cls in ((endpoint, Endpoint), (asgi, ASGI), (realtime, Realtime), (task_queue, TaskQueue)):
            self.assertIsInstance(deco(plain) if cls is not ASGI else deco(lambda: None), cls)
        e = endpoint(cpu=2, name="plus")(plain)
        self.assertEqual((e.cpu, e.stub_name, e(5)), (2, "plus", 5))
        self.assertIsInstance(schedule(when="@daily")(lambda: None), Schedule)

    def test_unknown_parameter_is_named_at_once(self):
        with self.assertRaises(TypeError) as ctx:
            endpoint(retries=2)
        self.assertIn("@endpoint has no parameter retries", str(ctx.exception))
        with self.assertRaises(TypeError) as ctx:
            realtime(plain, colour="red")
        self.assertIn("colour", str(ctx.exception))
        self.assertIn("keep_warm_seconds", str(ctx.exception), "lists what it takes")
        with self.assertRaises(TypeError):
            schedule(when="@daily", workers=2)

    def test_bad_values_name_the_parameter(self):
        cases = [
            ({"workers": 0}, ValueError, "workers"),
            ({"concurrent_requests": 0}, ValueError, "concurrent_requests"),
            ({"max_pending_tasks": 0}, ValueError, "max_pending_tasks"),
            ({"max_pending_tasks": "10"}, ValueError, "max_pending_tasks"),
            ({"authorized": "yes"}, TypeError, "authorized"),
            ({"autoscaler": {"max_containers": 2}}, TypeError, "autoscaler"),
            ({"memory": "lots"}, ValueError, "memory"),
            ({"gpu": 5}, ValueError, "gpu"),
            ({"gpu_count": 2}, ValueError, "gpu_count"),
            ({"cpu": 0}, ValueError, "cpu"),
            ({"timeout": 0}, ValueError, "timeout"),
            ({"keep_warm_seconds": -2}, ValueError, "keep_warm_seconds"),
            ({"image": "python:3.11"}, TypeError, "image"),
            ({"name": "a/b"}, ValueError, "name"),
            ({"name": ""}, ValueError, "name"),
            ({"on_start": 5}, TypeError, "on_start"),
            ({"volumes": "v"}, TypeError, "volumes"),
        ]
        for kw, exc, word in cases:
            with self.assertRaises(exc, msg=kw) as ctx:
                endpoint(plain, **kw)
            self.assertIn(word, str(ctx.exception), kw)

    def test_task_queue_retries_validated(self):
        with self.assertRaises(ValueError) as ctx:
            task_queue(plain, retries=-1)
        self.assertIn("retries", str(ctx.exception))

    def test_served_models(self):
        """served_models= on endpoint and asgi goes to the stub's extra; bad names are named at once."""
        web = asgi(served_models=["tiny-bigram", "Org/model-7B:q4"])(lambda: None)
        self.assertEqual(web.stub_extra()["served_models"], ["tiny-bigram", "Org/model-7B:q4"])
        ep = endpoint(served_models=("scorer",))(lambda x: x)
        self.assertEqual(ep.stub_extra()["served_models"], ["scorer"])
        self.assertNotIn("served_models", asgi(lambda: None).stub_extra())
        for bad, err in (("one", TypeError), ([], ValueError), (["has space"], ValueError), (["a", "a"], ValueError),
                         ([7], ValueError), (["x" * 129], ValueError)):
            with self.assertRaises(err, msg=repr(bad)) as cm:
                asgi(served_models=bad)(lambda: None)
            self.assertIn("served_models", str(cm.exception))
        with self.assertRaisesRegex(TypeError, "served_models"):
            realtime(served_models=["m"])(lambda message: message)

    def test_not_a_function(self):
        with self.assertRaises(TypeError) as ctx:
            endpoint(5)
        self.assertIn("@endpoint decorates a function", str(ctx.exception))

    def test_schedule_when(self):
        with self.assertRaises(TypeError) as ctx:
            schedule(lambda: None)
        self.assertIn("when=", str(ctx.exception))
        with self.assertRaises(TypeError) as ctx:
            schedule("*/5 * * * *")
        self.assertIn("@schedule(when='*/5 * * * *')", str(ctx.exception))
        for bad in ("* * * *", "* * * * * *", "every minute", "@reboot", "", "*/5 * * * ;"):
            with self.assertRaises(ValueError, msg=bad) as ctx:
                schedule(when=bad)(lambda: None)
            self.assertIn("when", str(ctx.exception))
        with self.assertRaises(TypeError):
            schedule(when=5)(lambda: None)
        for good in ("0 3 * * MON-FRI", "@HOURLY", "*/15 0-6 1,15 JAN ?"):
            self.assertTrue(schedule(when=good)(lambda: None).when)

    def test_schedule_and_asgi_take_no_arguments(self):
        with self.assertRaises(ValueError) as ctx:
            schedule(when="@daily")(plain)
        self.assertIn("needs x", str(ctx.exception))

        async def app(scope, receive, send):
            pass

        with self.assertRaises(ValueError) as ctx:
            asgi(app)
        self.assertIn("returns the ASGI app", str(ctx.exception))
        self.assertIn("scope, receive, send", str(ctx.exception))


class AutoscalerTest(unittest.TestCase):
    def test_defaults_and_config(self):
        a = QueueDepthAutoscaler()
        self.assertEqual((a.min_containers, a.max_containers, a.tasks_per_container), (0, 1, 0))
        self.assertEqual(a.to_config(), {"type": "queue_depth", "max_containers": 1, "tasks_per_container": 0})
        self.assertEqual(a, QueueDepthAutoscaler(0, 1, 0))
        self.assertIn("max_containers=1", repr(a))

    def test_alias(self):
        a = QueueDepthAutoscaler(max_containers=4, max_tasks_per_container=3)
        self.assertEqual((a.tasks_per_container, a.max_tasks_per_container), (3, 3))
        self.assertEqual(QueueDepthAutoscaler(tasks_per_container=3, max_tasks_per_container=3).tasks_per_container, 3)
        with self.assertRaises(ValueError) as ctx:
            QueueDepthAutoscaler(tasks_per_container=2, max_tasks_per_container=3)
        self.assertIn("same setting", str(ctx.exception))

    def test_invalid(self):
        cases = [
            ({"max_containers": 0}, "max_containers"),
            ({"min_containers": -1}, "min_containers"),
            ({"tasks_per_container": -1}, "tasks_per_container"),
            ({"max_tasks_per_container": -1}, "max_tasks_per_container"),
            ({"max_containers": True}, "max_containers"),
            ({"max_containers": 2.5}, "max_containers"),
            ({"max_containers": "3"}, "max_containers"),
            ({"min_containers": 3, "max_containers": 2}, "min_containers"),
        ]
        for kw, word in cases:
            with self.assertRaises(ValueError, msg=kw) as ctx:
                QueueDepthAutoscaler(**kw)
            self.assertIn(word, str(ctx.exception), kw)
        self.assertEqual(QueueDepthAutoscaler(max_containers=2.0).max_containers, 2)


if __name__ == "__main__":
    unittest.main()
