"""priority= and preemptible= on every decorator, priority= on Sandbox and Pod (docs/gpus.md): sent in stub.extra when set."""

import unittest

from berth import Pod, Sandbox, asgi, endpoint, function, realtime, schedule, task_queue


def handler():
    return None


class PriorityOptionTest(unittest.TestCase):
    def test_every_decorator_sends_priority_and_preemptible_in_extra(self):
        made = {
            "function": function(priority=5, preemptible=True)(handler),
            "endpoint": endpoint(name="e", priority=5, preemptible=True)(handler),
            "asgi": asgi(name="a", priority=5, preemptible=True)(handler),
            "task_queue": task_queue(name="q", priority=5, preemptible=True)(handler),
            "realtime": realtime(name="r", priority=5, preemptible=True)(handler),
            "schedule": schedule(when="*/5 * * * *", priority=5, preemptible=True)(handler),
        }
        for kind, obj in made.items():
            with self.subTest(kind=kind):
                extra = obj.stub_extra()
                self.assertEqual(extra.get("priority"), 5)
                self.assertIs(extra.get("preemptible"), True)
                self.assertNotIn("priority", obj.stub_config(), "stub.config keeps the spec's fields only")

    def test_defaults_send_nothing(self):
        for obj in (function(handler), Pod(entrypoint=["true"]), Sandbox()):
            with self.subTest(obj=type(obj).__name__):
                extra = obj.stub_extra()
                self.assertNotIn("priority", extra)
                self.assertNotIn("preemptible", extra)

    def test_sandbox_and_pod_take_a_priority_and_are_never_preemptible(self):
        self.assertEqual(Sandbox(priority=-3).stub_extra()["priority"], -3)
        self.assertEqual(Pod(entrypoint=["true"], priority=4).stub_extra()["priority"], 4)
        with self.assertRaises(TypeError):
            Pod(entrypoint=["true"], preemptible=True)

    def test_bad_values_are_refused_at_once(self):
        for bad in (True, 1.5, "high", 1001, -1001):
            with self.subTest(priority=bad):
                with self.assertRaisesRegex(ValueError, "priority must be an int from -1000 to 1000"):
                    function(priority=bad)(handler)
        with self.assertRaisesRegex(TypeError, "preemptible must be True or False"):
            function(preemptible="yes")(handler)


if __name__ == "__main__":
    unittest.main()
