"""Sandbox, its processes and streams, against the fake gateway's sandbox routes (tests/fake_sandboxes.py)."""

import io
import os
import unittest
from unittest import mock

from berth import (
    BerthError,
    Function,
    Image,
    ImageBuildError,
    Sandbox,
    SandboxConnectionError,
    SandboxFileSystemError,
    SandboxProcess,
    SandboxProcessError,
    SandboxProcessResponse,
)
from tests.sandbox_support import PY, SandboxTestCase


class SandboxLifecycleTest(SandboxTestCase):
    def test_create_registers_a_sandbox_stub_with_the_options(self):
        sb = self.new(
            cpu="500m",
            memory="2Gi",
            gpu=["H100", "A100"],
            ports=[8000, 8001, 8000],
            allow_list=["10.0.0.0/8", "2001:db8::/32"],
            secrets=["HF_TOKEN"],
            env={"MODE": "test"},
            ttl_seconds=-1,
        )
        body = self.gw.stub_bodies[-1]
        self.assertEqual(body["type"], "sandbox")
        self.assertTrue(body["name"].startswith("sandbox-"))
        self.assertEqual(body["config"]["runtime"], {"cpu": 1, "gpu": "H100,A100", "memory": 2048, "image_id": Image().image_id})
        self.assertEqual(body["config"]["handler"], "berth.sandbox:Sandbox")
        self.assertEqual((body["config"]["authorized"], body["config"]["keep_warm_seconds"]), (False, -1))
        extra = body["extra"]
        self.assertEqual(
            {k: extra[k] for k in ("cpu_millicores", "gpu_types", "gpu_count", "ports", "block_network", "allow_list", "ttl_seconds", "env", "secrets", "image_ref", "code_sha256")},
            {
                "cpu_millicores": 500,
                "gpu_types": ["H100", "A100"],
                "gpu_count": 1,
                "ports": [8000, 8001],
                "block_network": False,
                "allow_list": ["10.0.0.0/8", "2001:db8::/32"],
                "ttl_seconds": -1,
                "env": {"MODE": "test"},
                "secrets": ["HF_TOKEN"],
                "image_ref": "",
                "code_sha256": "",
            },
        )
        self.assertEqual(sb.sandbox_id(), sb.container_id)
        self.assertTrue(sb.container_id.startswith("ctr-"))
        self.assertEqual(sb.urls, {8000: f"{self.gw.url}/port/{sb.container_id}/8000/", 8001: f"{self.gw.url}/port/{sb.container_id}/8001/"})

    def test_the_stub_is_registered_once_per_sandbox_options(self):
        options = Sandbox(memory=256)
        before = len(self.gw.stub_bodies)
        a, b = options.create(), options.create()
        self.addCleanup(a.terminate)
        self.addCleanup(b.terminate)
        self.assertEqual(len(self.gw.stub_bodies), before + 1)
        self.assertNotEqual(a.container_id, b.container_id)
        self.assertNotEqual(Sandbox(memory=512).default_name(), options.default_name(), "other options, another stub")

    def test_bad_options_are_refused_before_any_request(self):
        before = len(self.gw.stub_bodies)
        cases = [
            dict(allow_list=[f"10.0.{i}.0/24" for i in range(11)]),
            dict(allow_list=["example.com"]),
            dict(allow_list=["10.0.0.1"]),
            dict(allow_list=["10.0.0.0/40"]),
            dict(allow_list="10.0.0.0/8"),
            dict(block_network=True, allow_list=["10.0.0.0/8"]),
            dict(ports=[0]),
            dict(ports=[70000]),
            dict(ports="8000"),
            dict(ttl_seconds=0),
            dict(cpu="lots"),
            dict(cpu=0),
            dict(memory="12 parsecs"),
            dict(gpu_count=2),
        ]
        for options in cases:
            with self.subTest(options=options), self.assertRaises(ValueError):
                Sandbox(**options)
        with self.assertRaises(TypeError):
            Sandbox(env={"A": 1})
        with self.assertRaisesRegex(ValueError, "at most 10"):
            Sandbox(allow_list=[f"10.0.{i}.0/24" for i in range(11)])
        with self.assertRaisesRegex(ValueError, "cannot be combined"):
            Sandbox(block_network=True, allow_list=["10.0.0.0/8"])
        with self.assertRaisesRegex(ValueError, "'example.com' is not in CIDR notation"):
            Sandbox(allow_list=["example.com"])
        self.assertEqual(len(self.gw.stub_bodies), before, "nothing was registered")
        Sandbox(block_network=True, allow_list=[])  # an empty list is no list
        Sandbox(allow_list=[f"10.0.{i}.0/24" for i in range(10)])

    def test_connect_and_the_connection_errors(self):
        sb = self.new()
        other = Sandbox().connect(sb.container_id)
        self.assertEqual((other.container_id, other.sandbox_id()), (sb.container_id, sb.container_id))
        self.assertEqual(other.process.run_code("print(6*7)").result, "42\n")
        with self.assertRaises(SandboxConnectionError) as cm:
            Sandbox().connect("ctr-unknown")
        self.assertEqual((cm.exception.code, cm.exception.sandbox_id), ("not_found", "ctr-unknown"))
        with self.assertRaises(SandboxConnectionError):
            Sandbox().connect("")
        self.assertTrue(sb.terminate())
        with self.assertRaises(SandboxConnectionError) as cm:
            Sandbox().connect(sb.container_id)
        self.assertEqual(cm.exception.code, "sandbox_terminated")
        # The other instance learns it from the coordinator, and is unusable from then on.
        with self.assertRaises(SandboxConnectionError) as cm:
            other.list_urls()
        self.assertEqual(cm.exception.code, "sandbox_terminated")
        self.assertTrue(other.terminated)

    def test_after_terminate_every_method_raises_without_a_request(self):
        sb = self.new()
        process = sb.process.exec(PY, "-c", "print('x')")
        local = os.path.join(self.tmp.name, "up.txt")
        with open(local, "w") as f:
            f.write("x")
        self.assertTrue(sb.terminate())
        calls = len(sb.api.debug_entries())
        attempts = {
            "terminate": sb.terminate,
            "expose_port": lambda: sb.expose_port(9000),
            "list_urls": sb.list_urls,
            "update_network_permissions": lambda: sb.update_network_permissions(block_network=True),
            "update_ttl": lambda: sb.update_ttl(60),
            "create_image_from_filesystem": sb.create_image_from_filesystem,
            "snapshot_memory": sb.snapshot_memory,
            "info": sb.info,
            "exec": lambda: sb.process.exec("true"),
            "run_code": lambda: sb.process.run_code("1"),
            "get_process": lambda: sb.process.get_process(process.pid),
            "list_processes": sb.process.list_processes,
            "status": process.status,
            "wait": process.wait,
            "kill": process.kill,
            "stdout.read": process.stdout.read,
            "logs iteration": lambda: list(process.logs),
            "stat_file": lambda: sb.fs.stat_file("/x"),
            "list_files": lambda: sb.fs.list_files("/"),
            "upload_file": lambda: sb.fs.upload_file(local, "/x"),
            "download_file": lambda: sb.fs.download_file("/x", local + ".down"),
            "delete_file": lambda: sb.fs.delete_file("/x"),
            "create_directory": lambda: sb.fs.create_directory("/d"),
            "delete_directory": lambda: sb.fs.delete_directory("/d"),
            "find_in_files": lambda: sb.fs.find_in_files("/", "x"),
            "replace_in_files": lambda: sb.fs.replace_in_files("/", "x", "y"),
        }
        for name, attempt in attempts.items():
            with self.subTest(method=name), self.assertRaises(SandboxConnectionError):
                attempt()
        self.assertEqual(len(sb.api.debug_entries()), calls, "no request after terminate()")
        self.assertFalse(os.path.exists(local + ".down"))

    def test_ports_network_and_ttl(self):
        sb = self.new(ports=[8000])
        url = sb.expose_port(9000)
        self.assertEqual(url, f"{self.gw.url}/port/{sb.container_id}/9000/")
        self.assertEqual(set(sb.list_urls()), {8000, 9000})
        self.assertEqual(sb.update_network_permissions(block_network=True), {"block_network": True, "allow_list": None})
        net = sb.update_network_permissions(allow_list=["192.168.0.0/16", "fd00::/8"])
        self.assertEqual(net["allow_list"], ["192.168.0.0/16", "fd00::/8"])
        self.assertEqual(sb.update_network_permissions(block_network=False, allow_list=[]), {"block_network": False, "allow_list": None})
        calls = len(sb.api.debug_entries())
        for bad in ({"block_network": True, "allow_list": ["10.0.0.0/8"]}, {"allow_list": ["nope"]}, {"allow_list": ["1.2.3.0/24"] * 11}):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                sb.update_network_permissions(**bad)
        for bad in (0, -2, 1.5, True):
            with self.subTest(ttl=bad), self.assertRaises(ValueError):
                sb.update_ttl(bad)
        with self.assertRaises(ValueError):
            sb.expose_port(0)
        self.assertEqual(len(sb.api.debug_entries()), calls, "refused before any request")
        self.assertIsNone(sb.update_ttl(-1))
        self.assertEqual(sb.update_ttl(120), "2030-01-01T00:00:00Z")
        self.assertEqual(self.fake.sandboxes[sb.container_id].ttl, 120)
        self.assertEqual(sb.info()["network"], {"block_network": False, "allow_list": None})

    def test_snapshots(self):
        sb = self.new()
        image_id = sb.create_image_from_filesystem()
        self.assertTrue(image_id.startswith("img-"))
        from_image = self.new(image=Image.from_id(image_id))
        self.assertEqual(self.gw.stub_bodies[-1]["extra"]["image_ref"], image_id)
        self.assertTrue(from_image.container_id.startswith("ctr-"))
        # A function runs from the snapshot too: its stub names the img- id (the cluster runs it on its agent).
        fn = Function(lambda: None, image=Image.from_id(image_id))
        self.assertFalse(fn.image.needs_build())
        self.assertEqual(fn.stub_extra("0" * 64)["image_ref"], image_id)
        with self.assertRaises(BerthError) as cm:
            sb.snapshot_memory()
        self.assertEqual(cm.exception.code, "checkpoint_unavailable")
        self.assertNotIsInstance(cm.exception, (SandboxConnectionError, SandboxProcessError, SandboxFileSystemError))
        self.assertIn("criu", cm.exception.message)
        self.fake.criu = True
        snapshot_id = sb.snapshot_memory()
        self.assertTrue(snapshot_id.startswith("snap-"))
        restored = Sandbox().create_from_memory_snapshot(snapshot_id)
        self.addCleanup(restored.terminate)
        self.assertNotEqual(restored.container_id, sb.container_id)
        with self.assertRaises(SandboxConnectionError):
            Sandbox().create_from_memory_snapshot("img-not-a-snapshot")
        with self.assertRaises(ValueError):
            Sandbox().create_from_memory_snapshot("")

    def test_debug_prints_recent_calls_without_the_token(self):
        options = Sandbox()
        sb = options.create()
        sb.process.run_code("print(1)")
        with self.assertRaises(SandboxProcessError):
            sb.process.get_process(77)
        sb.terminate()
        out = io.StringIO()
        options.debug(file=out)
        text = out.getvalue()
        self.assertIn("POST /stubs", text)
        self.assertIn(f"POST /sandboxes/{sb.container_id}/processes/run -> 200", text)
        self.assertIn('"args":["python3","-c","print(1)"]', text)
        self.assertIn("process_not_found", text)
        self.assertIn(f"POST /sandboxes/{sb.container_id}/terminate -> 200", text)
        self.assertNotIn("bt_test", text)
        printed = io.StringIO()
        with mock.patch("sys.stdout", printed):
            sb.debug()
        self.assertEqual(printed.getvalue(), text, "instances share their Sandbox's buffer; stdout by default")

    def test_without_a_token(self):
        with mock.patch.dict(os.environ, {"SERVICE_TOKEN": ""}):
            with self.assertRaises(BerthError) as cm:
                Sandbox().create()
        self.assertEqual(cm.exception.code, "unauthenticated")
        with self.assertRaises(BerthError) as cm:
            Sandbox(token="bt_wrong").create()
        self.assertEqual(cm.exception.code, "unauthenticated")


class SandboxProcessTest(SandboxTestCase):
    def without_run_route(self):
        self.fake.no_run_route = True
        self.addCleanup(setattr, self.fake, "no_run_route", False)

    def test_exec_is_one_request_that_brings_output_and_exit(self):
        sb = self.new()
        before = len(sb.api.debug_entries())
        p = sb.process.exec(PY, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")
        self.assertEqual(p.wait(), 3)
        self.assertEqual((p.stdout.read(), p.stderr.read()), ("out\n", "err\n"))
        r = sb.process.run_code("print(6 * 7)")
        self.assertEqual((r.exit_code, r.result, r.stderr), (0, "42\n", ""))
        routes = [e["route"] for e in sb.api.debug_entries()[before:]]
        self.assertEqual(routes, [f"/sandboxes/{sb.sandbox_id()}/processes/run"] * 2, "one request per command")

    def test_a_run_stream_cut_off_goes_on_with_the_other_routes(self):
        self.addCleanup(self.fake.cut.update, {"run": 0})
        self.fake.cut["run"], self.fake.cut_after = 1, 9
        sb = self.new()
        script = "import sys, time\nfor i in range(6):\n    print(f'line {i}', flush=True)\n    time.sleep(0.05)\nsys.exit(5)"
        p = sb.process.exec(PY, "-c", script)
        self.watchdog(sb, p.pid)
        self.assertEqual(list(p.stdout), [f"line {i}\n" for i in range(6)], "every byte once, in order")
        self.assertEqual(self.fake.cut["run"], 0, "the run's stream was cut")
        self.assertEqual(p.wait(), 5)

    def test_execs_one_after_another_share_one_connection(self):
        sb = self.new()
        self.fake.run_peers.clear()
        for i in range(3):
            p = sb.process.exec(PY, "-c", f"print({i})")
            self.assertEqual((p.wait(), p.stdout.read()), (0, f"{i}\n"))
        self.assertEqual(len(self.fake.run_peers), 3)
        self.assertEqual(len(set(self.fake.run_peers)), 1, "each exec after the first reuses the connection")
        # Two at once: the second cannot use the first's connection until its answer ended.
        a = sb.process.exec(PY, "-c", "import sys; sys.stdin.read(); print('a')")
        b = sb.process.exec(PY, "-c", "print('b')")
        self.assertEqual((b.wait(), b.stdout.read()), (0, "b\n"))
        a.write_stdin("", eof=True)
        self.assertEqual((a.wait(), a.stdout.read()), (0, "a\n"))
        self.assertEqual(len(set(self.fake.run_peers[3:])), 2)

    def test_a_kept_connection_the_coordinator_closed_is_replaced(self):
        sb = self.new()
        self.fake.run_peers.clear()
        self.addCleanup(setattr, self.fake, "close_after_run", False)
        self.fake.close_after_run = True
        for i in range(3):
            self.assertEqual(sb.process.run_code(f"print({i})").result, f"{i}\n")
        self.assertEqual(len(set(self.fake.run_peers)), 3, "a new connection each time")

    def test_a_coordinator_without_the_run_route_gets_three_requests(self):
        self.without_run_route()
        sb = self.new()
        self.assertEqual(sb.process.run_code("print('old')").result, "old\n")
        self.assertFalse(sb.api.run_route, "asked once, then not again")
        before = len(sb.api.debug_entries())
        self.assertEqual(sb.process.run_code("print('again')").result, "again\n")
        routes = [e["route"].split("?")[0] for e in sb.api.debug_entries()[before:]]
        self.assertEqual(routes[0], f"/sandboxes/{sb.sandbox_id()}/processes")

    def test_exec_wait_and_the_three_streams(self):
        sb = self.new()
        p = sb.process.exec(PY, "-c", "import os, sys; os.write(1, b'out\\n'); os.write(2, b'err\\n'); sys.exit(3)")
        self.assertIsInstance(p, SandboxProcess)
        self.assertEqual(p.pid, 1)
        self.assertEqual(p.wait(), 3)
        self.assertEqual(p.status(), (3, "exited"))
        self.assertEqual(p.stdout.read(), "out\n")
        self.assertEqual(p.stderr.read(), "err\n")
        self.assertEqual(sorted(p.logs.read().splitlines()), ["err", "out"])
        self.assertEqual(p.stdout.read(), "", "read() returns what remains: nothing after the first read")

    def test_status_is_minus_one_while_running_and_stdin(self):
        sb = self.new()
        p = sb.process.exec(PY, "-c", "import sys; data = sys.stdin.read(); print(data.upper())")
        self.watchdog(sb, p.pid)
        self.assertEqual(p.status(), (-1, "running"))
        self.assertEqual(p.wait(timeout=0.1), -1)
        self.assertEqual(p.write_stdin("hello "), 6)
        p.write_stdin(b"world", eof=True)
        self.assertEqual(p.wait(), 0)
        self.assertEqual(p.status()[0], 0)
        self.assertEqual(p.stdout.read(), "HELLO WORLD\n")

    def test_iteration_yields_lines_while_the_process_runs(self):
        sb = self.new()
        script = "import sys\nprint('one', flush=True)\nsys.stdin.readline()\nprint('two\\nthr', end='', flush=True)\nprint('ee')\nprint('tail', end='')"
        p = sb.process.exec(PY, "-c", script)
        self.watchdog(sb, p.pid)
        lines = iter(p.stdout)
        # The process waits for stdin after its first line: only a stream read as it comes sees it now.
        self.assertEqual(next(lines), "one\n")
        p.write_stdin("go\n")
        self.assertEqual(list(lines), ["two\n", "three\n", "tail"])
        self.assertEqual(p.wait(), 0)

    def test_read_after_partial_iteration_returns_the_rest(self):
        sb = self.new()
        p = sb.process.exec(PY, "-c", "print('a'); print('b'); print('c', end='')")
        p.wait()
        lines = iter(p.stdout)
        self.assertEqual(next(lines), "a\n")
        self.assertEqual(p.stdout.read(), "b\nc")

    def test_a_wait_and_a_stream_whose_coordinator_dies_resume_from_where_they_were(self):
        # Each cut is a connection closed under the request, as when the coordinator serving it is
        # SIGKILLed behind a load balancer: the SDK asks again and another one answers.
        # The three-request exec (a coordinator without the run route) reads and waits with these routes.
        self.without_run_route()
        self.addCleanup(self.fake.cut.update, {"wait": 0, "output": 0})
        sb = self.new()
        script = "import sys, time\nfor i in range(6):\n    print(f'line {i}', flush=True)\n    time.sleep(0.05)\nsys.exit(5)"
        p = sb.process.exec(PY, "-c", script)
        self.watchdog(sb, p.pid)
        self.fake.cut["output"], self.fake.cut_after = 2, 9
        self.assertEqual(list(p.stdout), [f"line {i}\n" for i in range(6)], "every byte once, in order")
        self.assertEqual(self.fake.cut["output"], 0, "both follows were cut and resumed")
        self.fake.cut["wait"] = 2
        self.assertEqual(p.wait(), 5)
        self.assertEqual(self.fake.cut["wait"], 0)

    def test_a_wait_gives_up_once_no_coordinator_answered_for_the_bound(self):
        self.without_run_route()
        sb = self.new()
        p = sb.process.exec(PY, "-c", "import time; time.sleep(30)")
        self.watchdog(sb, p.pid)
        self.addCleanup(self.fake.cut.update, {"wait": 0, "output": 0})
        self.fake.cut["wait"] = 1000
        with mock.patch("berth.client.unreachable.UNAVAILABLE_WAIT_S", 0.3):
            with self.assertRaises(BerthError) as cm:
                p.wait()
        self.assertEqual(cm.exception.code, "unavailable")
        self.fake.cut["wait"] = 0
        p.kill()
        self.assertEqual(p.wait(), 137)

    def test_the_bounded_buffer_skips_what_it_no_longer_holds(self):
        self.without_run_route()
        self.fake.output_limit = 1000
        sb = self.new()
        p = sb.process.exec(PY, "-c", "import sys; sys.stdout.write('x' * 4000 + 'END')")
        self.assertEqual(p.wait(), 0)
        text = p.stdout.read()
        self.assertEqual(len(text), 1000)
        self.assertTrue(text.endswith("END"))
        self.assertEqual(p.stdout.dropped, 3003)
        self.assertEqual(p.stdout.offset, 4003)

    def test_kill(self):
        sb = self.new()
        p = sb.process.exec(PY, "-c", "import time; time.sleep(120)")
        self.assertTrue(p.kill())
        self.assertEqual(p.wait(), 137)
        q = sb.process.exec(PY, "-c", "import time; time.sleep(120)")
        q.kill("SIGTERM")
        self.assertEqual(q.wait(), 143)

    def test_get_and_list_processes_and_unknown_pids(self):
        sb = self.new()
        a = sb.process.exec(PY, "-c", "print(1)")
        b = sb.process.exec(PY, "-c", "print(2)", cwd="/")
        a.wait(), b.wait()
        procs = sb.process.list_processes()
        self.assertEqual(sorted(procs), [1, 2])
        self.assertEqual(procs[2].args, [PY, "-c", "print(2)"])
        got = sb.process.get_process(2)
        self.assertEqual((got.pid, got.cwd, got.status()), (2, "/", (0, "exited")))
        self.assertEqual(got.stdout.read(), "2\n")
        for bad in (99, 0, "1", None):
            with self.subTest(pid=bad), self.assertRaises(SandboxProcessError):
                sb.process.get_process(bad)
        with self.assertRaises(SandboxProcessError) as cm:
            sb.process.get_process(99)
        self.assertEqual((cm.exception.code, cm.exception.pid), ("process_not_found", 99))
        ghost = SandboxProcess(sb, 42)
        for attempt in (ghost.stdout.read, ghost.status, ghost.wait, ghost.kill, lambda: list(ghost.logs)):
            with self.assertRaises(SandboxProcessError):
                attempt()

    def test_run_code(self):
        sb = self.new()
        r = sb.process.run_code("import sys; print(1 + 1); print('warn', file=sys.stderr)")
        self.assertIsInstance(r, SandboxProcessResponse)
        self.assertEqual((r.result, r.stderr, r.exit_code), ("2\n", "warn\n", 0))
        self.assertEqual(self.fake.sandboxes[sb.container_id].processes[r.pid].args[:2], ["python3", "-c"])
        p = sb.process.run_code("print('later')", blocking=False)
        self.assertIsInstance(p, SandboxProcess)
        self.assertEqual((p.wait(), p.stdout.read()), (0, "later\n"))
        failed = sb.process.run_code("raise SystemExit(5)")
        self.assertEqual(failed.exit_code, 5)

    def test_exec_cwd_env_and_bad_arguments(self):
        sb = self.new()
        sb.fs.create_directory("/work")
        p = sb.process.exec(PY, "-c", "import os; print(os.path.basename(os.getcwd()), os.environ['GREETING'])", cwd="/work", env={"GREETING": "hi"})
        self.assertEqual((p.wait(), p.stdout.read()), (0, "work hi\n"))
        listed = sb.process.exec([PY, "-c", "print('list form')"])
        self.assertEqual((listed.wait(), listed.stdout.read()), (0, "list form\n"))
        with self.assertRaises(SandboxFileSystemError) as cm:
            sb.process.exec("true", cwd="/missing")
        self.assertEqual(cm.exception.path, "/missing")
        for args in ((), ("",), ("ls", 3)):
            with self.subTest(args=args), self.assertRaises(ValueError):
                sb.process.exec(*args)
        with self.assertRaises(ValueError):
            sb.process.exec("ls", env={"A": 1})


if __name__ == "__main__":
    unittest.main()
