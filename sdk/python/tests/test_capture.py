"""The per-task output tee (in-process: no bridge needed)."""

import io
import threading
import unittest

from berth.runtime.capture import MAX_PIECE, Capture, Tee


class CaptureTest(unittest.TestCase):
    def setUp(self):
        self.sent = []
        self.capture = Capture(lambda task_id, stream, data: self.sent.append((task_id, stream, data)), interval_s=60)
        self.real = io.StringIO()
        self.out = Tee(self.capture, "stdout", self.real)

    def test_writes_reach_the_real_stream_and_the_current_task(self):
        self.out.write("before\n")
        task = self.capture.start("t1")
        self.out.write("a")
        self.out.write("b\n")
        self.capture.finish(task)
        self.out.write("after\n")
        self.assertEqual(self.real.getvalue(), "before\nab\nafter\n")
        self.assertEqual(self.sent, [("t1", "stdout", "ab\n")])

    def test_explicit_flush_sends_at_once(self):
        task = self.capture.start("t1")
        self.out.write("now")
        self.out.flush()
        self.assertEqual(self.sent, [("t1", "stdout", "now")])
        self.capture.finish(task)

    def test_threads_keep_their_own_task(self):
        tasks = {}
        barrier = threading.Barrier(2)

        def run(name):
            tasks[name] = self.capture.start(name)
            barrier.wait()
            self.out.write(f"from {name}\n")
            barrier.wait()
            self.capture.finish(tasks[name])

        threads = [threading.Thread(target=run, args=(n,)) for n in ("t1", "t2")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sorted(self.sent), [("t1", "stdout", "from t1\n"), ("t2", "stdout", "from t2\n")])

    def test_a_single_task_gets_output_of_threads_it_started(self):
        task = self.capture.start("t1")
        t = threading.Thread(target=lambda: self.out.write("child\n"))
        t.start()
        t.join()
        self.capture.finish(task)
        self.assertEqual(self.sent, [("t1", "stdout", "child\n")])

    def test_large_writes_are_split(self):
        task = self.capture.start("t1")
        self.out.write("x" * (MAX_PIECE * 2 + 5))
        self.capture.finish(task)
        self.assertEqual([len(d) for _, _, d in self.sent], [MAX_PIECE, MAX_PIECE, 5])


if __name__ == "__main__":
    unittest.main()
