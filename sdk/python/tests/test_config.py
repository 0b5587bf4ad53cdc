import json
import os
import tempfile
import unittest

from berth.client.config import ConfigError, current_credentials


class CredentialsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, ".berth", "config.json")
        os.makedirs(os.path.dirname(self.path))
        with open(self.path, "w") as f:
            json.dump(
                {
                    "profiles": {
                        "default": {"url": "http://coord:8420/", "token": "bt_default"},
                        "other": {"url": "http://other:1", "token": "bt_other"},
                    }
                },
                f,
            )

    def tearDown(self):
        self.dir.cleanup()

    def env(self, **kw):
        return {"HOME": self.dir.name, **kw}

    def test_default_profile(self):
        c = current_credentials(env=self.env())
        self.assertEqual((c.url, c.token, c.profile), ("http://coord:8420", "bt_default", "default"))

    def test_named_profile(self):
        c = current_credentials(env=self.env(BERTH_PROFILE="other"))
        self.assertEqual((c.url, c.token), ("http://other:1", "bt_other"))

    def test_environment_overrides_profile(self):
        c = current_credentials(env=self.env(SERVICE_TOKEN="bt_env", BERTH_URL="http://env:2"))
        self.assertEqual((c.url, c.token), ("http://env:2", "bt_env"))

    def test_explicit_token_wins(self):
        c = current_credentials("bt_arg", env=self.env(SERVICE_TOKEN="bt_env"))
        self.assertEqual(c.token, "bt_arg")

    def test_empty_variables_are_unset(self):
        c = current_credentials(env=self.env(SERVICE_TOKEN="", BERTH_PROFILE=""))
        self.assertEqual(c.token, "bt_default")

    def test_no_file_gives_defaults(self):
        c = current_credentials(env={"HOME": os.path.join(self.dir.name, "nowhere")})
        self.assertEqual((c.url, c.token), ("http://127.0.0.1:8420", None))

    def test_corrupt_file_names_it(self):
        with open(self.path, "w") as f:
            f.write("{nope")
        with self.assertRaises(ConfigError) as ctx:
            current_credentials(env=self.env())
        self.assertIn(self.path, str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
