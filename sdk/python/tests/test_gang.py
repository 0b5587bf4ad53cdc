"""Gang mode of the runner (berth/runtime/gang.py): rank 0 and rank 1 as real runner subprocesses on 127.0.0.1.

Each rank has a fake agent bridge of its own, as on two hosts; only rank 0's hands out tasks.
"""

import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

from tests.fake_bridge import FakeBridge, start_runner, stop_runner
from tests.test_runner import args, value

APP = """
import os, threading, time

def work(x):
    rank = int(os.environ["BERTH_GANG_RANK"])
    task_id = os.environ["BERTH_TASK_ID"]
    out = os.environ["GANG_TEST_DIR"]
    with open(os.path.join(out, f"seen-{rank}-{task_id}"), "w") as f:
        f.write(repr(x))
    print(f"hello from {rank}", flush=True)
    if x == "fail-on-1" and rank == 1:
        raise ValueError("rank one says no")
    if x == "fail-on-2" and rank == 2:
        raise RuntimeError("rank two says no")
    if x == "fail-on-0" and rank == 0:
        raise KeyError("rank zero says no")
    if x == "fail-fast-on-1":
        if rank == 1:
            raise ValueError("rank one gives up at once")
        time.sleep(3)
        open(os.path.join(out, f"finished-0-{task_id}"), "w").close()
    if x == "hang-on-1" and rank == 1:
        time.sleep(60)
    if x == "hang":
        time.sleep(60)
    if x == "exit-soon-on-1" and rank == 1:
        # Rank 1 answers, then its process ends: the task still completes, and the gang ends.
        threading.Thread(target=lambda: (time.sleep(0.5), os._exit(3))).start()
    return {"rank": rank, "x": x}

def all_reduce(x):
    # What a gang is for: torch.distributed over the gang's env (RANK, WORLD_SIZE, MASTER_ADDR, ...).
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    try:
        if x == "hang-on-1":
            # Rank 0 waits in the collective for a rank 1 that never comes to it.
            if dist.get_rank() == 1:
                open(os.path.join(os.environ["GANG_TEST_DIR"], "seen-1-" + os.environ["BERTH_TASK_ID"]), "w").close()
                time.sleep(60)
            x = 1
        t = torch.tensor([float(x * (dist.get_rank() + 1))])
        dist.all_reduce(t)
        return t.item()
    finally:
        dist.destroy_process_group()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


class Gang:
    """A gang of `size` ranks; `start(rank)` starts one rank's runner with its own bridge."""

    def __init__(self, size: int = 2, handler: str = "app:work", python: str = sys.executable, **env):
        self.dir = tempfile.TemporaryDirectory()
        self.code = os.path.join(self.dir.name, "code")
        self.out = os.path.join(self.dir.name, "out")
        os.mkdir(self.code)
        os.mkdir(self.out)
        with open(os.path.join(self.code, "app.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        self.size = size
        self.handler = handler
        self.python = python
        self.port = free_port()
        self.master_port = free_port()
        self.env = env
        self.bridges = {}
        self.procs = {}
        self.logs = {}

    def start(self, rank: int) -> None:
        sock = os.path.join(self.dir.name, f"agent-{rank}.sock")
        self.bridges[rank] = FakeBridge(sock)
        env = {
            "BERTH_GANG_ID": "gang-test",
            "BERTH_GANG_RANK": str(rank),
            "BERTH_GANG_SIZE": str(self.size),
            "BERTH_GANG_ADDRS": ",".join(["127.0.0.1"] * self.size),
            "BERTH_GANG_CONTROL_PORT": str(self.port),
            "BERTH_GANG_CONNECT_TIMEOUT_S": "20",
            # The rest of shared/gang.ts gangEnv, on the loopback interface.
            "RANK": str(rank),
            "NODE_RANK": str(rank),
            "WORLD_SIZE": str(self.size),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(self.master_port),
            "GLOO_SOCKET_IFNAME": "lo",
            "GANG_TEST_DIR": self.out,
            **self.env,
        }
        self.procs[rank] = start_runner(self.code, sock, self.handler, python=self.python, **env)

    def seen(self, rank: int, task_id: str):
        path = os.path.join(self.out, f"seen-{rank}-{task_id}")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return f.read()

    def log(self, rank: int) -> str:
        """The rank's output (stopping it first if it still runs)."""
        if rank not in self.logs:
            self.logs[rank] = stop_runner(self.procs[rank])
        return self.logs[rank]

    def stop(self) -> None:
        for rank in self.procs:
            self.log(rank)
        for bridge in self.bridges.values():
            bridge.close()
        self.dir.cleanup()


class GangTest(unittest.TestCase):
    """One gang for all: none of these tasks ends it."""

    @classmethod
    def setUpClass(cls):
        cls.gang = Gang(2, BERTH_GANG_GRACE_S="30")
        cls.gang.start(0)
        cls.gang.start(1)
        cls.bridge = cls.gang.bridges[0]

    @classmethod
    def tearDownClass(cls):
        cls.gang.stop()

    def run_task(self, task_id, payload):
        self.bridge.add(task_id, payload)
        return self.bridge.wait_result(task_id, timeout=30)

    def test_a_task_runs_on_every_rank_with_the_same_args_and_returns_rank_0s_result(self):
        r = self.run_task("t-same", args({"a": [1, 2]}))
        self.assertEqual(r["status"], "COMPLETE", r)
        self.assertEqual(value(r), {"rank": 0, "x": {"a": [1, 2]}})
        self.assertEqual(self.gang.seen(0, "t-same"), repr({"a": [1, 2]}))
        self.assertEqual(self.gang.seen(1, "t-same"), repr({"a": [1, 2]}))
        # Rank 1's output reaches the caller through rank 0, marked with its rank.
        wait_for(lambda: "[rank 1] hello from 1" in self.bridge.output("t-same"), what="rank 1's output")
        self.assertIn("hello from 0", self.bridge.output("t-same"))
        # Rank 1 never asks its own agent for tasks.
        self.assertEqual(self.gang.bridges[1].asks, [])

    def test_a_follower_exception_fails_the_task_naming_its_rank(self):
        r = self.run_task("t-fail-1", args("fail-on-1"))
        self.assertEqual(r["status"], "FAILED", r)
        self.assertEqual(r["error"]["type"], "berth.GangError")
        self.assertTrue(
            r["error"]["message"].startswith("gang rank 1 failed: ValueError: rank one says no"), r["error"]["message"]
        )
        self.assertIn("rank one says no", r["error"]["traceback"])
        self.assertFalse(r["retry"])
        # The gang goes on.
        ok = self.run_task("t-after-fail-1", args(3))
        self.assertEqual(value(ok), {"rank": 0, "x": 3})
        self.assertEqual(self.gang.seen(1, "t-after-fail-1"), "3")

    def test_rank_0s_exception_is_reported_as_usual(self):
        r = self.run_task("t-fail-0", args("fail-on-0"))
        self.assertEqual(r["status"], "FAILED", r)
        self.assertEqual(r["error"]["type"], "KeyError")
        self.assertIn("rank zero says no", r["error"]["message"])
        self.assertIn("pickled", r["error"])
        ok = self.run_task("t-after-fail-0", args(4))
        self.assertEqual(value(ok), {"rank": 0, "x": 4})

    def test_a_follower_failure_is_reported_while_rank_0_still_runs(self):
        r = self.run_task("t-fast", args("fail-fast-on-1"))
        self.assertEqual(r["status"], "FAILED", r)
        self.assertTrue(r["error"]["message"].startswith("gang rank 1 failed: ValueError: rank one gives up at once"))
        self.assertFalse(os.path.exists(os.path.join(self.gang.out, "finished-0-t-fast")), "reported only after rank 0")
        # Rank 0's call ends within the grace period: its result is not posted again and the gang goes on.
        ok = self.run_task("t-after-fast", args(5))
        self.assertEqual(value(ok), {"rank": 0, "x": 5})
        self.assertTrue(os.path.exists(os.path.join(self.gang.out, "finished-0-t-fast")))
        self.assertEqual([k for k in self.bridge.kinds("t-fast") if k == "result"], ["result"])


def python_with_torch():
    """An interpreter that imports torch (this one, or Debian's with python3-torch); None without."""
    for python in dict.fromkeys([sys.executable, "/usr/bin/python3"]):
        try:
            ok = subprocess.run([python, "-c", "import torch.distributed"], capture_output=True, timeout=120).returncode
        except (OSError, subprocess.TimeoutExpired):
            continue
        if ok == 0:
            return python
    return None


class ThreeRanksTest(unittest.TestCase):
    def test_every_rank_runs_the_task_and_a_failing_one_is_named(self):
        gang = Gang(3)
        self.addCleanup(gang.stop)
        for rank in (2, 0, 1):  # the order the containers start in does not matter
            gang.start(rank)
        gang.bridges[0].add("t-3", args(7))
        r = gang.bridges[0].wait_result("t-3", timeout=30)
        self.assertEqual(value(r), {"rank": 0, "x": 7})
        self.assertEqual([gang.seen(rank, "t-3") for rank in range(3)], ["7", "7", "7"])
        gang.bridges[0].add("t-3-fail", args("fail-on-2"))
        r = gang.bridges[0].wait_result("t-3-fail", timeout=30)
        self.assertTrue(r["error"]["message"].startswith("gang rank 2 failed: RuntimeError: rank two says no"), r)


class TorchAllReduceTest(unittest.TestCase):
    """The acceptance test's gang in small: two ranks that all-reduce with gloo over loopback."""

    @classmethod
    def setUpClass(cls):
        cls.python = python_with_torch()

    def start_gang(self) -> Gang:
        if self.python is None:
            why = "no interpreter here imports torch (Debian: apt-get install python3-torch; npm test installs it)"
            if os.environ.get("CI") == "true":
                self.fail(why)  # CI installs it (scripts/ensure-deps.sh): a skip there would hide a broken install
            self.skipTest(why)
        gang = Gang(2, handler="app:all_reduce", python=self.python)
        self.addCleanup(gang.stop)
        gang.start(0)
        gang.start(1)
        return gang

    def test_a_gloo_all_reduce_across_the_gang_returns_the_sum(self):
        gang = self.start_gang()
        # Twice: each task sets the process group up and tears it down again.
        for task_id, x, total in (("t-sum-1", 2, 6.0), ("t-sum-2", 5, 15.0)):
            gang.bridges[0].add(task_id, args(x))
            r = gang.bridges[0].wait_result(task_id, timeout=60)
            self.assertEqual(r["status"], "COMPLETE", r)
            self.assertEqual(value(r), total)

    def test_killing_a_rank_in_a_collective_fails_the_task_naming_it(self):
        gang = self.start_gang()
        gang.bridges[0].add("t-kill", args("hang-on-1"))
        wait_for(lambda: gang.seen(1, "t-kill") is not None, timeout=60, what="rank 1 in the task")
        gang.procs[1].kill()
        r = gang.bridges[0].wait_result("t-kill", timeout=60)
        self.assertEqual(r["status"], "FAILED", r)
        self.assertEqual(
            r["error"]["message"], "gang rank 1 ended while the task ran (its connection to rank 0 closed)"
        )
        self.assertNotEqual(gang.procs[0].wait(timeout=30), 0)


class FollowerDiesTest(unittest.TestCase):
    def check_follower_dies(self, payload: str) -> Gang:
        gang = Gang(2)
        self.addCleanup(gang.stop)
        gang.start(0)
        gang.start(1)
        gang.bridges[0].add("t-hang", args(payload))
        wait_for(lambda: gang.seen(1, "t-hang") is not None, what="rank 1 to start the task")
        gang.procs[1].kill()
        r = gang.bridges[0].wait_result("t-hang", timeout=30)
        asks = len(gang.bridges[0].asks)
        self.assertEqual(r["status"], "FAILED", r)
        self.assertEqual(r["error"]["type"], "berth.GangError")
        self.assertEqual(
            r["error"]["message"], "gang rank 1 ended while the task ran (its connection to rank 0 closed)"
        )
        self.assertNotEqual(gang.procs[0].wait(timeout=20), 0)
        self.assertEqual(len(gang.bridges[0].asks), asks, "rank 0 asks for no task once the gang is broken")
        return gang

    def test_a_follower_that_dies_after_rank_0_returned_fails_the_task_and_rank_0_exits(self):
        gang = self.check_follower_dies("hang-on-1")
        self.assertIn("the gang cannot run another task", gang.log(0))

    def test_a_follower_that_dies_while_rank_0_still_runs_fails_the_task_at_once_and_rank_0_exits(self):
        gang = self.check_follower_dies("hang")
        self.assertIn("rank 1 ended while task t-hang ran; ending the gang", gang.log(0))


def gang_after_one_task(test: unittest.TestCase) -> "Gang":
    """A gang of two, started, that has completed one task (the case then ends one rank)."""
    gang = Gang(2)
    test.addCleanup(gang.stop)
    gang.start(0)
    gang.start(1)
    gang.bridges[0].add("t-1", args(1))
    test.assertEqual(gang.bridges[0].wait_result("t-1", timeout=30)["status"], "COMPLETE")
    return gang


class FollowerEndsBetweenTasksTest(unittest.TestCase):
    def test_a_follower_that_ends_after_answering_ends_the_gang_after_the_result(self):
        gang = Gang(2)
        self.addCleanup(gang.stop)
        gang.start(0)
        gang.start(1)
        gang.bridges[0].add("t-bye", args("exit-soon-on-1"))
        r = gang.bridges[0].wait_result("t-bye", timeout=30)
        self.assertEqual(r["status"], "COMPLETE", r)
        self.assertEqual(value(r), {"rank": 0, "x": "exit-soon-on-1"})
        self.assertEqual(gang.procs[1].wait(timeout=20), 3)
        self.assertNotEqual(gang.procs[0].wait(timeout=20), 0)
        self.assertIn("rank 1 ended between tasks; ending the gang", gang.log(0))

    def test_a_follower_killed_between_tasks_ends_the_gang(self):
        gang = gang_after_one_task(self)
        gang.procs[1].kill()
        self.assertNotEqual(gang.procs[0].wait(timeout=20), 0)


class Rank0DiesTest(unittest.TestCase):
    def test_a_follower_exits_when_rank_0_goes(self):
        gang = gang_after_one_task(self)
        gang.procs[0].kill()
        self.assertNotEqual(gang.procs[1].wait(timeout=20), 0)


class MissingRankTest(unittest.TestCase):
    def test_rank_0_exits_naming_the_ranks_that_never_connected(self):
        gang = Gang(3, BERTH_GANG_CONNECT_TIMEOUT_S="2")
        self.addCleanup(gang.stop)
        gang.start(0)
        gang.start(1)
        self.assertNotEqual(gang.procs[0].wait(timeout=20), 0)
        self.assertIn("gang rank(s) 2 did not connect to rank 0", gang.log(0))
        self.assertEqual(gang.bridges[0].asks, [])

    def test_a_follower_exits_when_rank_0_never_listens(self):
        gang = Gang(2, BERTH_GANG_CONNECT_TIMEOUT_S="1")
        self.addCleanup(gang.stop)
        gang.start(1)
        self.assertNotEqual(gang.procs[1].wait(timeout=20), 0)
        self.assertIn("gang rank 1 could not reach rank 0", gang.log(1))

    def test_rank_0_exits_when_its_gang_address_never_comes_up(self):
        gang = Gang(2, BERTH_GANG_CONNECT_TIMEOUT_S="1", BERTH_GANG_ADDRS="192.0.2.1,192.0.2.2")
        self.addCleanup(gang.stop)
        gang.start(0)
        self.assertNotEqual(gang.procs[0].wait(timeout=20), 0)
        self.assertIn("rank 0 cannot listen on 192.0.2.1:", gang.log(0))

    def test_bad_gang_settings_exit_saying_why(self):
        gang = Gang(2, BERTH_GANG_ADDRS="")
        self.addCleanup(gang.stop)
        gang.start(0)
        self.assertNotEqual(gang.procs[0].wait(timeout=20), 0)
        self.assertIn("BERTH_GANG_ADDRS is empty", gang.log(0))


if __name__ == "__main__":
    unittest.main()
