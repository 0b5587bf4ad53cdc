"""Volume: names and mount paths checked as the coordinator checks them, and carried in every stub config."""

import unittest

from berth import Image, Pod, Sandbox, Volume, endpoint, function, task_queue
from berth.api.locate import Location
from berth.api.volume import volumes_config, volumes_option

LOC = Location(root="/tmp", module="app", qualname="handler")


def handler():
    return 1


class VolumeTest(unittest.TestCase):
    def test_config(self):
        v = Volume(name="weights", mount_path="./weights")
        self.assertEqual(v.config(), {"name": "weights", "mount_path": "./weights"})
        self.assertEqual(v, Volume("weights", "./weights"))
        self.assertEqual(volumes_config([v, Volume("cache", "/data/cache")]), [v.config(), {"name": "cache", "mount_path": "/data/cache"}])
        self.assertIsNone(volumes_config(None))

    def test_bad_names(self):
        for name in ["", "-x", "a/b", "..", "x" * 64, "a b", 5, None]:
            with self.assertRaisesRegex(ValueError, "volume name"):
                Volume(name=name, mount_path="./x")

    def test_bad_mount_paths(self):
        for path, why in [("", "non-empty"), ("../x", r"'\.\.'"), ("a/../../b", r"'\.\.'"), ("/", "names no directory"),
                          ("./", "names no directory"), ("/volumes/x", "under /volumes"), ("/proc/x", "under /proc")]:
            with self.assertRaisesRegex(ValueError, why):
                Volume(name="v", mount_path=path)

    def test_option(self):
        with self.assertRaisesRegex(TypeError, "list"):
            volumes_option("v")
        with self.assertRaisesRegex(TypeError, "berth.Volume"):
            volumes_option([{"name": "v", "mount_path": "./v"}])
        with self.assertRaisesRegex(ValueError, "listed twice"):
            volumes_option([Volume("v", "./a"), Volume("v", "./b")])

    def test_every_decorator_and_sandbox_carry_volumes(self):
        v = Volume(name="shared", mount_path="./shared")
        want = [{"name": "shared", "mount_path": "./shared"}]
        self.assertEqual(function(volumes=[v])(handler).stub_config(LOC)["volumes"], want)
        self.assertEqual(endpoint(volumes=[v])(handler).stub_config(LOC)["volumes"], want)
        self.assertEqual(task_queue(volumes=[v])(handler).stub_config(LOC)["volumes"], want)
        self.assertEqual(Pod(entrypoint=["true"], volumes=[v]).stub_config()["volumes"], want)
        self.assertEqual(Sandbox(image=Image(), volumes=[v]).stub_config()["volumes"], want)
        self.assertIsNone(function()(handler).stub_config(LOC)["volumes"])


if __name__ == "__main__":
    unittest.main()
