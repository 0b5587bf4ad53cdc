"""Output outside a container and its argument checks (the upload path is tested in test/outputs/relay.test.ts)."""

import os
import tempfile
import unittest
from unittest import mock

from berth.api.output import Output
from berth.errors import BerthError


class FakeImage:
    def save(self, path, format=None):
        with open(path, "wb") as f:
            f.write(b"fake " + format.encode())


class OutputTest(unittest.TestCase):
    def test_save_needs_a_container(self):
        with tempfile.NamedTemporaryFile() as f, mock.patch.dict(os.environ, {"BERTH_AGENT_SOCKET": ""}):
            with self.assertRaises(BerthError) as e:
                Output(path=f.name).save()
            self.assertEqual(e.exception.code, "failed_precondition")
            self.assertIn("inside a berth container", str(e.exception))

    def test_unsaved(self):
        out = Output(path="nothing.txt")
        self.assertIsNone(out.id)
        self.assertFalse(out.exists())
        with self.assertRaises(BerthError) as e:
            out.stat()
        self.assertEqual(e.exception.code, "not_found")
        for bad in [0, -5, 1.5, True, "60"]:
            with self.assertRaises(ValueError):
                out.public_url(expires=bad)
        with self.assertRaises(TypeError):
            Output(path="")

    def test_from_pil_image(self):
        out = Output.from_pil_image(FakeImage())
        try:
            self.assertTrue(out.path.endswith(".png"))
            with open(out.path, "rb") as f:
                self.assertEqual(f.read(), b"fake PNG")
        finally:
            os.unlink(out.path)
        with self.assertRaises(TypeError):
            Output.from_pil_image("not an image")


if __name__ == "__main__":
    unittest.main()
