"""build_image (berth.client.images): a build whose stream breaks (its coordinator died) is asked
for once more through the same URL — behind a load balancer another coordinator answers — and a
build that breaks twice, or fails, raises ImageBuildError (docs/reliability.md, "Several coordinators")."""

import io
import os
import socket
import tempfile
import unittest
from unittest import mock

from berth import Image
from berth.errors import ImageBuildError

from .fake_gateway import FakeGateway


class BuildRetryTest(unittest.TestCase):
    def setUp(self):
        self.gw = FakeGateway()
        self.requests = 0
        self.cut = 1  # how many requests are cut mid-build
        self.between_chunks = False
        self.no_room = 0  # how many requests after the cut ones answer "no room"
        self.gw.routes.append(self.route)
        self.dir = tempfile.TemporaryDirectory()
        self.env = mock.patch.dict(
            os.environ,
            {"BERTH_URL": self.gw.url, "SERVICE_TOKEN": "bt_test", "BERTH_CONFIG": os.path.join(self.dir.name, "none.json")},
        )
        self.env.start()

    def tearDown(self):
        self.env.stop()
        self.gw.close()
        self.dir.cleanup()

    def route(self, h, method):
        if method != "POST" or not h.path.endswith("/build"):
            return False
        h.rfile.read(int(h.headers.get("Content-Length", "0")))
        self.requests += 1
        if self.cut < self.requests <= self.cut + self.no_room:
            h.send_response(200)
            h.send_header("Content-Type", "application/x-ndjson")
            h.send_header("Transfer-Encoding", "chunked")
            h.end_headers()
            err = {"code": "resource_exhausted", "message": "asked for 1 core, this host has 2 cores (0 cores free)"}
            h.line({"event": "error", "error": err})
            h.wfile.write(b"0\r\n\r\n")
            return True
        h.send_response(200)
        h.send_header("Content-Type", "application/x-ndjson")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.line({"event": "step", "step": 1, "total": 1, "name": "sleep 30"})
        if self.requests <= self.cut:
            # The coordinator dies mid-build: the chunked answer stops inside a chunk, or between two.
            if self.between_chunks:
                h.line({"event": "output", "line": "sleeping"})
            else:
                h.wfile.write(b"40\r\n{\"event\": \"out")
            h.wfile.flush()
            h.close_connection = True
            h.connection.shutdown(socket.SHUT_RDWR)
            return True
        h.line({"event": "step_done", "step": 1, "cached": True})
        h.line({"event": "image", "image": {"image_id": "img-1", "ref": "registry/img-1"}, "env": {}})
        h.wfile.write(b"0\r\n\r\n")
        return True

    def build(self):
        from berth.api.function import default_client
        from berth.client.images import build_image

        client = default_client()
        client._berth_workspace = "ws-1"
        out = io.StringIO()
        return build_image(client, Image().add_commands(["sleep 30"]), out=out), out.getvalue()

    def assert_built_after(self, requests, said):
        """The build ends with the image after `requests` requests, its output saying `said`."""
        record, out = self.build()
        self.assertEqual(record["ref"], "registry/img-1")
        self.assertEqual(self.requests, requests)
        self.assertIn(said, out)

    def test_a_broken_build_stream_is_asked_for_again(self):
        self.assert_built_after(2, "the build's connection broke")

    def test_an_answer_cut_between_two_chunks_is_asked_for_again(self):
        # What a SIGKILLed coordinator behind a balancer looked like in test/faults/ha.test.ts.
        self.between_chunks = True
        self.assert_built_after(2, "stopped before naming the built image")

    def test_no_room_after_a_break_is_asked_again_within_the_window(self):
        # The dead build's room on its agent is freed a moment later.
        self.no_room = 2
        with mock.patch("berth.client.images.REBUILD_PAUSE_S", 0.01):
            self.assert_built_after(4, "the build cannot start yet")

    def test_breaks_past_the_window_fail_with_the_reason(self):
        self.cut = 1000
        with mock.patch("berth.client.images.REBUILD_WINDOW_S", 0.3):
            with self.assertRaises(ImageBuildError) as cm:
                self.build()
        self.assertGreaterEqual(self.requests, 2)
        self.assertIn("building the image failed", str(cm.exception))
        self.assertIn("broke", str(cm.exception))

    def test_no_room_without_a_break_is_not_asked_again(self):
        self.cut = 0
        self.no_room = 1
        with self.assertRaises(ImageBuildError) as cm:
            self.build()
        self.assertEqual(self.requests, 1)
        self.assertIn("0 cores free", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
