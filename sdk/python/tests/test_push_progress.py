"""The push of a built image to the cluster registry, and the pull of a build's base, as the SDK prints them
(berth/client/images.py)."""

import io
import unittest

from berth.client.images import PullProgress, PushProgress


def events(ref="127.0.0.1:5000/berth/ws:img-1"):
    total = 10 * 1024 * 1024
    yield {"ref": ref, "blobs_done": 0, "blobs_total": 2, "bytes_done": 0, "bytes_total": total, "blobs_skipped": 0}
    yield {"ref": ref, "blobs_done": 0, "blobs_total": 2, "bytes_done": 4 << 20, "bytes_total": total, "blobs_skipped": 0}
    yield {"ref": ref, "blobs_done": 1, "blobs_total": 2, "bytes_done": 8 << 20, "bytes_total": total, "blobs_skipped": 0}
    yield {"ref": ref, "blobs_done": 2, "blobs_total": 2, "bytes_done": total, "bytes_total": total, "blobs_skipped": 1}


class Tty(io.StringIO):
    def isatty(self):
        return True


class PushProgressTest(unittest.TestCase):
    def test_plain_lines_off_a_terminal(self):
        out = io.StringIO()
        p = PushProgress(out)
        for ev in events():
            p.update(ev)
        lines = out.getvalue().splitlines()
        self.assertEqual(
            lines,
            [
                "push 127.0.0.1:5000/berth/ws:img-1: 2 layers, 10.0 MiB",
                "push 127.0.0.1:5000/berth/ws:img-1: 1/2 layers, 8.0 MiB/10.0 MiB",
                "push 127.0.0.1:5000/berth/ws:img-1: 2/2 layers, 10.0 MiB/10.0 MiB",
                "pushed 127.0.0.1:5000/berth/ws:img-1 (1 of 2 layers were already there)",
            ],
        )
        self.assertNotIn("\r", out.getvalue())

    def test_a_bar_on_a_terminal(self):
        out = Tty()
        p = PushProgress(out)
        for ev in events():
            p.update(ev)
        text = out.getvalue()
        self.assertIn("\r", text)
        self.assertIn(" 40% 4.0 MiB/10.0 MiB", text)
        self.assertIn("[" + "#" * 30 + "] 100%", text)
        self.assertTrue(text.endswith("pushed 127.0.0.1:5000/berth/ws:img-1 (1 of 2 layers were already there)\n"))


def pull_events(ref="127.0.0.1:5000/base@sha256:ab12"):
    total = 10 * 1024 * 1024
    # One of three blobs was cached: it counts as done from the first event on.
    yield {"ref": ref, "blobs_done": 1, "blobs_total": 3, "bytes_done": 1 << 20, "bytes_total": total, "blobs_skipped": 1}
    yield {"ref": ref, "blobs_done": 1, "blobs_total": 3, "bytes_done": 5 << 20, "bytes_total": total, "blobs_skipped": 1}
    yield {"ref": ref, "blobs_done": 2, "blobs_total": 3, "bytes_done": 6 << 20, "bytes_total": total, "blobs_skipped": 1}
    yield {"ref": ref, "blobs_done": 3, "blobs_total": 3, "bytes_done": total, "bytes_total": total, "blobs_skipped": 1}


class PullProgressTest(unittest.TestCase):
    def test_plain_lines_off_a_terminal(self):
        out = io.StringIO()
        p = PullProgress(out)
        for ev in pull_events():
            p.update(ev)
        self.assertEqual(
            out.getvalue().splitlines(),
            [
                "pull 127.0.0.1:5000/base@sha256:ab12: 3 layers, 10.0 MiB",
                "pull 127.0.0.1:5000/base@sha256:ab12: 2/3 layers, 6.0 MiB/10.0 MiB",
                "pull 127.0.0.1:5000/base@sha256:ab12: 3/3 layers, 10.0 MiB/10.0 MiB",
                "pulled 127.0.0.1:5000/base@sha256:ab12 (1 of 3 layers were cached)",
            ],
        )

    def test_a_bar_on_a_terminal(self):
        out = Tty()
        p = PullProgress(out)
        for ev in pull_events():
            p.update(ev)
        text = out.getvalue()
        self.assertIn("\rpull 127.0.0.1:5000/base@sha256:ab12 [", text)
        self.assertIn(" 50% 5.0 MiB/10.0 MiB (1/3 layers)", text)
        self.assertIn("[" + "#" * 30 + "] 100%", text)
        self.assertTrue(text.endswith("pulled 127.0.0.1:5000/base@sha256:ab12 (1 of 3 layers were cached)\n"))


if __name__ == "__main__":
    unittest.main()
