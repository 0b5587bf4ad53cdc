"""The gang's wire (berth/runtime/gang_wire.py) in-process: settings, frames and their bounds, the hello."""

import socket
import struct
import threading
import time
import unittest

from berth.runtime import gang_wire
from berth.runtime.gang_wire import Conn, GangClosed, GangConfig, accept_all, connect, listen
from tests.test_gang import free_port


def gang_env(**over):
    env = {
        "BERTH_GANG_ID": "g1",
        "BERTH_GANG_RANK": "0",
        "BERTH_GANG_SIZE": "2",
        "BERTH_GANG_ADDRS": "127.0.0.1,127.0.0.1",
        "BERTH_GANG_CONTROL_PORT": "29400",
    }
    env.update(over)
    return env


class ConfigTest(unittest.TestCase):
    def test_no_gang_or_a_gang_of_one_is_none(self):
        self.assertIsNone(GangConfig.from_env({}))
        self.assertIsNone(GangConfig.from_env({"BERTH_GANG_SIZE": "1"}))

    def test_the_contracts_env(self):
        cfg = GangConfig.from_env(gang_env(BERTH_GANG_RANK="1", BERTH_GANG_CONTROL_PORT="29400"))
        self.assertEqual((cfg.gang_id, cfg.rank, cfg.size, cfg.addrs, cfg.port), ("g1", 1, 2, ["127.0.0.1"] * 2, 29400))
        self.assertEqual(cfg.connect_timeout_s, gang_wire.DEFAULT_CONNECT_TIMEOUT_S)
        self.assertEqual(GangConfig.from_env({"BERTH_GANG_SIZE": "2", "BERTH_GANG_ADDRS": "10.0.0.1"}).port, 29400)

    def test_settings_that_cannot_work_are_refused(self):
        for over, why in (
            ({"BERTH_GANG_SIZE": "two"}, "not numbers"),
            ({"BERTH_GANG_RANK": "2"}, "outside a gang of 2"),
            ({"BERTH_GANG_ADDRS": ""}, "BERTH_GANG_ADDRS is empty"),
            ({"BERTH_GANG_CONTROL_PORT": "70000"}, "is not a port"),
        ):
            with self.subTest(over=over):
                with self.assertRaisesRegex(ValueError, why):
                    GangConfig.from_env(gang_env(**over))


class FrameTest(unittest.TestCase):
    def setUp(self):
        a, b = socket.socketpair()
        self.a, self.b = Conn(a), Conn(b)
        self.addCleanup(self.a.close)
        self.addCleanup(self.b.close)

    def test_a_header_and_raw_payload_round_trip(self):
        self.a.send({"t": "task", "id": "t-1"}, b"\x00\x80pickled")
        self.assertEqual(self.b.recv(), ({"t": "task", "id": "t-1"}, b"\x00\x80pickled"))

    def test_an_oversized_payload_is_never_sent(self):
        with self.assertRaisesRegex(ValueError, "over the limits"):
            self.a.send({"t": "task"}, b"x" * (gang_wire.MAX_PAYLOAD_BYTES + 1))

    def test_an_oversized_or_garbled_frame_ends_the_connection(self):
        self.a.sock.sendall(struct.pack(">II", 2, gang_wire.MAX_PAYLOAD_BYTES + 1))
        with self.assertRaisesRegex(GangClosed, "over the limits"):
            self.b.recv()
        self.a.sock.sendall(struct.pack(">II", 3, 0) + b"{x}")
        with self.assertRaisesRegex(GangClosed, "not JSON"):
            self.b.recv()

    def test_a_closed_peer_is_gang_closed(self):
        self.a.close()
        with self.assertRaises(GangClosed):
            self.b.recv()


class HelloTest(unittest.TestCase):
    def test_strangers_are_refused_and_the_rank_is_accepted(self):
        port = free_port()
        cfg0 = GangConfig.from_env(gang_env(BERTH_GANG_CONTROL_PORT=str(port)))
        srv = listen(cfg0, time.monotonic() + 5)
        self.addCleanup(srv.close)
        got = {}
        t = threading.Thread(target=lambda: got.update(accept_all(srv, cfg0, time.monotonic() + 10)))
        t.start()
        # A connection of another gang and one claiming a rank outside the gang: both closed.
        for hello in ({"t": "hello", "rank": 1, "gang_id": "other"}, {"t": "hello", "rank": 5, "gang_id": "g1"}):
            c = Conn(socket.create_connection(("127.0.0.1", port)))
            self.addCleanup(c.close)
            c.send(hello)
            with self.assertRaises(GangClosed):
                c.recv()
        follower = connect(GangConfig.from_env(gang_env(BERTH_GANG_RANK="1", BERTH_GANG_CONTROL_PORT=str(port))))
        self.addCleanup(follower.close)
        t.join(10)
        self.assertEqual(list(got), [1])
        self.addCleanup(got[1].close)
        got[1].send({"t": "task", "id": "t-1"}, b"args")
        self.assertEqual(follower.recv(), ({"t": "task", "id": "t-1"}, b"args"))


if __name__ == "__main__":
    unittest.main()
