"""pool= on every decorator, Sandbox, Pod and Image (docs/pools.md): sent as stub.extra.pool (Image: its spec)."""

import unittest

from berth import Image, Pod, Sandbox, asgi, endpoint, function, realtime, schedule, task_queue


def handler():
    return None


class PoolOptionTest(unittest.TestCase):
    def test_every_decorator_sends_its_pool_in_extra(self):
        made = {
            "function": function(pool="gpu")(handler),
            "endpoint": endpoint(name="e", pool="gpu")(handler),
            "asgi": asgi(name="a", pool="gpu")(handler),
            "task_queue": task_queue(name="q", pool="gpu")(handler),
            "realtime": realtime(name="r", pool="gpu")(handler),
            "schedule": schedule(when="*/5 * * * *", pool="gpu")(handler),
        }
        for kind, obj in made.items():
            with self.subTest(kind=kind):
                self.assertEqual(obj.stub_extra().get("pool"), "gpu")
                self.assertNotIn("pool", obj.stub_config(), "stub.config keeps the spec's fields only")

    def test_no_pool_sends_nothing(self):
        self.assertNotIn("pool", function(handler).stub_extra())
        self.assertNotIn("pool", Pod(entrypoint=["true"]).stub_extra())
        self.assertNotIn("pool", Image().spec(), "an image without a pool keeps its id")

    def test_sandbox_pod_and_image(self):
        self.assertEqual(Sandbox(pool="edge").stub_extra()["pool"], "edge")
        self.assertEqual(Pod(entrypoint=["true"], pool="edge").stub_extra()["pool"], "edge")
        self.assertEqual(Image(pool="edge").spec()["pool"], "edge")
        self.assertNotEqual(Image(pool="edge").image_id, Image().image_id)

    def test_bad_pool_names_are_refused_at_once(self):
        for bad in ("", "GPU", "-x", "a b", "x" * 64, 3):
            with self.subTest(pool=bad):
                with self.assertRaisesRegex(ValueError, "pool must be a pool name"):
                    function(pool=bad)(handler)
                with self.assertRaisesRegex(ValueError, "pool must be a pool name"):
                    Sandbox(pool=bad)
                with self.assertRaisesRegex(ValueError, "pool must be a pool name"):
                    Image(pool=bad)


if __name__ == "__main__":
    unittest.main()
