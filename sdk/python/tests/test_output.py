"""Output outside a container and its argument checks (the upload path is tested in test/outputs/relay.test.ts)."""

import io
import os
import tempfile
import unittest
from unittest import mock

from berth.api.output import Output, OutputNotSavedError, Stat
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
        with tempfile.NamedTemporaryFile() as f:
            out = Output(path=f.name)
            self.assertIsNone(out.id)
            self.assertFalse(out.exists())
            with self.assertRaises(OutputNotSavedError) as e:
                out.stat()
            self.assertIsInstance(e.exception, BerthError)
            self.assertEqual(e.exception.code, "not_found")
            for bad in [0, -5, 1.5, True, "60"]:
                with self.assertRaises(ValueError):
                    out.public_url(expires=bad)
        with self.assertRaises(TypeError):
            Output(path="")
        with self.assertRaises(FileNotFoundError):
            Output(path="nothing.txt")

    def test_from_file_copies_what_the_handle_holds(self):
        out = Output.from_file(io.BytesIO(b"bytes"))
        try:
            with open(out.path, "rb") as f:
                self.assertEqual(f.read(), b"bytes")
        finally:
            os.unlink(out.path)
        with self.assertRaises(TypeError):
            Output.from_file("not a file")

    def test_stat_reads_beta9_fields_and_keys(self):
        s = Stat.from_answer(
            {"id": "out-1", "name": "a.txt", "size": 5, "mode": "-rw-------", "atime": "2030-01-01T00:00:00.000Z",
             "mtime": "2030-01-01T00:00:01.000Z", "created_at": "2030-01-01T00:00:00.000Z", "expires_at": None}
        )
        self.assertEqual((s.mode, s.size, s.mtime.second), ("-rw-------", 5, 1))
        self.assertEqual(s["size"], 5)
        self.assertEqual(s[1], 5)
        self.assertIsNone(s.expires_at)
        self.assertEqual(list(s.to_dict())[:4], ["mode", "size", "atime", "mtime"])
        with self.assertRaises(KeyError):
            s["nope"]

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
