"""Queue, Map and Signal on the SDK side, over an in-memory transport that
keeps the coordinator's contract (docs/queues.md); the real path is tested by
test/objects/relay.test.ts and the end-to-end suite."""

import threading
import unittest

from berth import serialize
from berth.api.signal import Signal
from berth.api.state import Map, Queue
from berth.api import state_transport
from berth.errors import BerthError


class MemoryTransport:
    def __init__(self):
        self.queues = {}
        self.maps = {}
        self.signals = {}
        self.calls = []

    def __call__(self, req, timeout):
        self.calls.append(req)
        op, name = req["op"], req.get("name")
        if op == "queue.put":
            self.queues.setdefault(name, []).append(req["value"])
            return {}
        if op == "queue.pop":
            q = self.queues.get(name) or []
            return {"value": q.pop(0) if q else None}
        if op == "queue.size":
            return {"size": len(self.queues.get(name) or [])}
        m = self.maps.setdefault(name, {})
        if op == "map.set":
            m[req["key"]] = req["value"]
            return {}
        if op == "map.get":
            return {"value": m.get(req["key"])}
        if op == "map.delete":
            return {"deleted": m.pop(req["key"], None) is not None}
        if op == "map.keys":
            return {"keys": sorted(m)}
        if op == "map.size":
            return {"size": len(m)}
        if op == "map.items":
            keys = sorted(k for k in m if "after" not in req or k > req["after"])
            # Two per page, to exercise paging.
            page = keys[:2]
            return {"items": [[k, m[k]] for k in page], "next": page[-1] if len(keys) > 2 else None}
        if op == "signal.set":
            self.signals[name] = req["ttl"]
            return {"signal": {"name": name, "set": True, "revision": 1, "expires_at": None}}
        if op == "signal.clear":
            return {"cleared": self.signals.pop(name, None) is not None}
        if op == "signal.state":
            return {"signal": {"name": name, "set": name in self.signals, "revision": 1, "expires_at": None}}
        raise BerthError("invalid_request", f"unknown op {op}")


class StateTest(unittest.TestCase):
    def setUp(self):
        self.t = MemoryTransport()
        state_transport.install(self.t)
        self.addCleanup(state_transport.install, None)

    def test_queue_is_fifo_and_pop_on_empty_is_none(self):
        q = Queue("jobs")
        self.assertIsNone(q.pop())
        self.assertTrue(q.empty())
        q.put({"n": 1})
        q.put([2])
        self.assertEqual(q.size(), 2)
        self.assertEqual(len(q), 2)
        self.assertEqual(q.pop(), {"n": 1})
        self.assertEqual(q.pop(block=True, timeout=1), [2])
        self.assertIsNone(q.pop(block=True, timeout=0.1))
        # Values are the SDK's pickles, base64.
        q.put("x")
        self.assertEqual(serialize.loads(serialize.unb64(self.t.queues["jobs"][0])), "x")

    def test_map_has_the_dict_interface(self):
        m = Map(name="seen")
        m["a"] = 1
        m.set("b", [2])
        m["c.d"] = None
        self.assertEqual(m["a"], 1)
        self.assertEqual(m.get("zz", "default"), "default")
        self.assertIn("c.d", m)
        self.assertNotIn("zz", m)
        self.assertIsNone(m["c.d"])
        with self.assertRaises(KeyError):
            m["zz"]
        with self.assertRaises(KeyError):
            del m["zz"]
        self.assertEqual(len(m), 3)
        self.assertEqual(m.keys(), ["a", "b", "c.d"])
        self.assertEqual(list(m), ["a", "b", "c.d"])
        self.assertEqual(m.items(), [("a", 1), ("b", [2]), ("c.d", None)])
        self.assertEqual(m.values(), [1, [2], None])
        del m["a"]
        self.assertEqual(m.keys(), ["b", "c.d"])
        with self.assertRaises(TypeError):
            m[1] = 2

    def test_names_are_checked_before_any_call(self):
        for bad in ["", "a.b", "a b", "-x", "x" * 64, None, 3]:
            with self.assertRaises(ValueError):
                Queue(bad)
            with self.assertRaises(ValueError):
                Map(bad)
            with self.assertRaises(ValueError):
                Signal(bad)
        self.assertEqual(self.t.calls, [])

    def test_signal_set_clear_and_is_set(self):
        s = Signal("reload")
        self.assertFalse(s.is_set())
        self.assertTrue(s.set(ttl=60))
        self.assertEqual(self.t.signals["reload"], 60)
        self.assertTrue(s.is_set())
        self.assertTrue(s.clear())
        self.assertFalse(s.clear())
        Signal("other").set()
        self.assertEqual(self.t.signals["other"], 600)

    def test_a_handler_outside_a_container_starts_no_listener(self):
        before = threading.active_count()
        Signal("reload", handler=lambda: None, clear_after_interval=5)
        self.assertEqual(threading.active_count(), before)

    def test_errors_of_the_coordinator_come_through(self):
        def refuse(req, timeout):
            raise BerthError("limit_exceeded", "the workspace's queues hold their limit of 3 items")

        state_transport.install(refuse)
        with self.assertRaises(BerthError) as e:
            Queue("jobs").put(1)
        self.assertEqual(e.exception.code, "limit_exceeded")


if __name__ == "__main__":
    unittest.main()
