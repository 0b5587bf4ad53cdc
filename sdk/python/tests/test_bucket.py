"""CloudBucket and CloudBucketConfig: checked as shared/buckets.ts checks them, carried in the stub config's volumes."""

import unittest

from berth import CloudBucket, CloudBucketConfig, Pod, Sandbox, Volume, function
from berth.api.locate import Location
from berth.api.volume import volumes_config, volumes_option

LOC = Location(root="/tmp", module="app", qualname="handler")


def handler():
    return 1


class CloudBucketTest(unittest.TestCase):
    def test_entry_beside_a_volume(self):
        raw = CloudBucket(name="raw-data", mount_path="./raw",
                          config=CloudBucketConfig(access_key="S3_KEY", secret_key="S3_SECRET",
                                                   endpoint="https://s3.example", region="us-east-1", read_only=True))
        self.assertEqual(raw.config.access_key, "S3_KEY")
        w = Volume(name="weights", mount_path="./weights")
        want = [
            {"name": "weights", "mount_path": "./weights"},
            {"name": "raw-data", "mount_path": "./raw", "config": {
                "read_only": True, "access_key": "S3_KEY", "secret_key": "S3_SECRET",
                "endpoint": "https://s3.example", "region": "us-east-1"}},
        ]
        self.assertEqual(volumes_config([w, raw]), want)
        self.assertEqual(function(volumes=[w, raw])(handler).stub_config(LOC)["volumes"], want)
        self.assertEqual(Sandbox(volumes=[raw]).stub_config()["volumes"], want[1:])
        self.assertEqual(Pod(entrypoint=["true"], volumes=[raw]).stub_config()["volumes"], want[1:])

    def test_public_bucket_defaults(self):
        b = CloudBucket("public-data", "/data", CloudBucketConfig())
        self.assertEqual(b.stub_entry()["config"], {"read_only": False, "access_key": None, "secret_key": None,
                                                    "endpoint": None, "region": None})

    def test_bad_values(self):
        cases = [
            (lambda: CloudBucket("ab", "./x", CloudBucketConfig()), ValueError, "cloud bucket name"),
            (lambda: CloudBucket("a/b", "./x", CloudBucketConfig()), ValueError, "cloud bucket name"),
            (lambda: CloudBucket("bucket", "../x", CloudBucketConfig()), ValueError, r"'\.\.'"),
            (lambda: CloudBucket("bucket", "./x", {"read_only": True}), TypeError, "CloudBucketConfig"),
            (lambda: CloudBucketConfig(access_key="K"), ValueError, "both access_key and secret_key"),
            (lambda: CloudBucketConfig(access_key="1K", secret_key="S"), ValueError, "workspace secret"),
            (lambda: CloudBucketConfig(endpoint="ftp://x"), ValueError, "http:// or https://"),
            (lambda: CloudBucketConfig(endpoint="https://u:p@x"), ValueError, "without credentials"),
            (lambda: CloudBucketConfig(endpoint="https://x/a,b"), ValueError, "commas"),
            (lambda: CloudBucketConfig(region="us east"), ValueError, "region"),
            (lambda: CloudBucketConfig(read_only="yes"), TypeError, "read_only"),
        ]
        for make, exc, why in cases:
            with self.assertRaisesRegex(exc, why):
                make()

    def test_names_unique_within_kind(self):
        c = CloudBucketConfig()
        with self.assertRaisesRegex(ValueError, "cloud bucket 'data' is listed twice"):
            volumes_option([CloudBucket("data", "./a", c), CloudBucket("data", "./b", c)])
        # A Volume and a bucket may share a name: a volume lives under /volumes, a bucket only at its mount_path.
        self.assertEqual(len(volumes_option([Volume("data", "./v"), CloudBucket("data", "./b", c)])), 2)


if __name__ == "__main__":
    unittest.main()
