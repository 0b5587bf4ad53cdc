"""The sandbox process server: its framing, and the server run as a real subprocess."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

from berth.runtime import sandbox_init as si

INIT = si.__file__


class FramingTest(unittest.TestCase):
    def test_frames_split_anywhere_come_out_whole(self):
        stream = si.encode(si.STDIN, b"abc") + si.encode(si.CLOSE_STDIN) + si.encode_json(si.SIGNAL, {"signal": 9})
        for cut in range(len(stream) + 1):
            r = si.FrameReader()
            frames = r.feed(stream[:cut]) + r.feed(stream[cut:])
            self.assertEqual(frames, [(si.STDIN, b"abc"), (si.CLOSE_STDIN, b""), (si.SIGNAL, b'{"signal":9}')])
            self.assertEqual(bytes(r.buf), b"")

    def test_header_is_kind_then_big_endian_length(self):
        self.assertEqual(si.encode(si.STDOUT, b"hi"), b"O\x00\x00\x00\x02hi")

    def test_an_oversized_frame_is_refused_before_its_payload_arrives(self):
        r = si.FrameReader(max_frame=4)
        with self.assertRaises(si.ProtocolError) as cm:
            r.feed(si.HEADER.pack(si.STDIN, 5))
        self.assertIn("5 bytes", str(cm.exception))

    def test_exit_codes_follow_exec_session(self):
        self.assertEqual(si.exit_code(3 << 8), 3)
        self.assertEqual(si.exit_code(signal.SIGKILL), 137)
        self.assertEqual(si.exit_code(signal.SIGTERM), 143)

    def test_start_requests_are_checked(self):
        ok = si.parse_start(b'{"args":["ls","-l"],"env":{"A":"1"},"cwd":"/tmp","user":[1000,1000]}')
        self.assertEqual(ok, {"args": ["ls", "-l"], "env": {"A": "1"}, "cwd": "/tmp", "user": [1000, 1000]})
        bad = {
            b"nope": "not JSON",
            b"[]": "object",
            b'{"args":[]}': "args",
            b'{"args":[""]}': "args[0]",
            b'{"args":["a\\u0000"]}': "args",
            b'{"args":["a"],"env":{"A=B":"1"}}': "env",
            b'{"args":["a"],"cwd":"rel"}': "cwd",
            b'{"args":["a"],"user":[1]}': "user",
            b'{"args":["a"],"user":[true,0]}': "user",
        }
        for payload, word in bad.items():
            with self.assertRaises(ValueError, msg=payload) as cm:
                si.parse_start(payload)
            self.assertIn(word, str(cm.exception), payload)


class Client:
    """One process over one connection, as the agent drives it."""

    def __init__(self, path, req):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(path)
        self.reader = si.FrameReader()
        self.pending = []
        self.send(si.START, json.dumps(req).encode())

    def send(self, kind, payload=b""):
        self.sock.sendall(si.encode(kind, payload))

    def next(self):
        while not self.pending:
            data = self.sock.recv(65536)
            if not data:
                return None
            self.pending += self.reader.feed(data)
        return self.pending.pop(0)

    def run_to_end(self):
        out = {si.STDOUT: b"", si.STDERR: b""}
        frames = []
        while True:
            f = self.next()
            if f is None:
                break
            frames.append(f[0])
            if f[0] in out:
                out[f[0]] += f[1]
            elif f[0] in (si.EXIT, si.FAILED):
                result = json.loads(f[1].decode())
        self.sock.close()
        return frames, out[si.STDOUT], out[si.STDERR], result


class ServerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "init.sock")
        self.server = subprocess.Popen([sys.executable, "-u", "-I", INIT, self.path], stderr=subprocess.PIPE)
        self.addCleanup(self._stop)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.path):
            self.assertIsNone(self.server.poll(), "the server ended early")
            self.assertLess(time.monotonic(), deadline, "no socket after 10 s")
            time.sleep(0.01)

    def _stop(self):
        if self.server.poll() is None:
            self.server.kill()
        self.server.wait()
        self.server.stderr.close()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def test_socket_is_private_to_its_owner(self):
        self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o600)

    def test_output_and_exit_code(self):
        c = Client(self.path, {"args": ["sh", "-c", "echo out; echo err >&2; exit 7"]})
        frames, out, err, result = c.run_to_end()
        self.assertEqual(frames[0], si.STARTED)
        self.assertEqual(frames[-1], si.EXIT)
        self.assertEqual((out, err, result), (b"out\n", b"err\n", {"exit_code": 7}))

    def test_stdin_then_close(self):
        c = Client(self.path, {"args": ["cat"]})
        c.send(si.STDIN, b"hello ")
        c.send(si.STDIN, b"there")
        c.send(si.CLOSE_STDIN)
        _, out, _, result = c.run_to_end()
        self.assertEqual((out, result), (b"hello there", {"exit_code": 0}))

    def test_env_overlays_the_servers_and_cwd_applies(self):
        c = Client(self.path, {"args": ["sh", "-c", "echo $X:$(pwd):${HOME:+home}"], "env": {"X": "y"}, "cwd": "/tmp"})
        _, out, _, _ = c.run_to_end()
        self.assertEqual(out, b"y:/tmp:home\n" if os.environ.get("HOME") else b"y:/tmp:\n")

    def test_a_process_starts_alike_spawned_or_forked(self):
        # Without a cwd or user the server spawns (posix_spawn); with one it forks: the process must not tell.
        # Each program reads its own /proc entries (a shell's would show the shell's state while it waits).
        def out_of(args, extra):
            _, out, err, result = Client(self.path, {"args": args, "env": {"X": "x"}, **extra}).run_to_end()
            self.assertEqual((err, result), (b"", {"exit_code": 0}), (args, extra))
            return out.decode()

        glibc = (1 << 31) | (1 << 32)  # signals 32 and 33, glibc's own: its business
        for extra in ({}, {"cwd": "/"}):
            status = dict(line.split(":\t", 1) for line in out_of(["cat", "/proc/self/status"], extra).splitlines())
            # Nothing blocked; SIGPIPE and SIGXFSZ, which Python ignores, back at their defaults.
            self.assertEqual((int(status["SigBlk"], 16), int(status["SigIgn"], 16) & ~glibc), (0, 0), extra)
            stat = out_of(["cat", "/proc/self/stat"], extra).split()
            self.assertEqual(stat[0], stat[5], "a session leader")
            # Its stdin, stdout and stderr, and ls's own directory: none of the server's descriptors.
            self.assertEqual(out_of(["ls", "/proc/self/fd"], extra).split(), ["0", "1", "2", "3"], extra)
            self.assertEqual(out_of(["sh", "-c", "echo $X"], extra), "x\n", extra)

    def test_the_program_is_looked_up_on_the_processs_own_path(self):
        bins = [os.path.join(self.dir, d) for d in ("a", "b")]
        for d in bins:
            os.mkdir(d)
            self.addCleanup(os.rmdir, d)
        mode_and_text = {bins[0]: (0o644, "not executable"), bins[1]: (0o755, "echo from-b")}
        for d, (mode, text) in mode_and_text.items():
            path = os.path.join(d, "berth-tool")
            with open(path, "w") as f:
                f.write("#!/bin/sh\n%s\n" % text)
            os.chmod(path, mode)
            self.addCleanup(os.unlink, path)
        path = "%s:%s:/usr/bin:/bin" % tuple(bins)
        for extra in ({}, {"cwd": "/"}):
            # a/berth-tool cannot run (EACCES), so b/'s does, as execvp goes on past it.
            _, out, _, result = Client(self.path, {"args": ["berth-tool"], "env": {"PATH": path}, **extra}).run_to_end()
            self.assertEqual((out, result), (b"from-b\n", {"exit_code": 0}), extra)
            # Only a/'s: its error, not "not found".
            _, _, _, result = Client(self.path, {"args": ["berth-tool"], "env": {"PATH": bins[0]}, **extra}).run_to_end()
            self.assertEqual((result["stage"], result["errno"]), ("exec", 13), extra)
            # Not on the process's PATH (the server's own does not count).
            _, _, _, result = Client(self.path, {"args": ["sh"], "env": {"PATH": bins[1]}, **extra}).run_to_end()
            self.assertEqual((result["stage"], result["errno"]), ("exec", 2), extra)
            # A path with a slash is run as it is.
            _, out, _, result = Client(self.path, {"args": [bins[1] + "/berth-tool"], **extra}).run_to_end()
            self.assertEqual((out, result), (b"from-b\n", {"exit_code": 0}), extra)

    def test_signal_reports_128_plus_signo(self):
        c = Client(self.path, {"args": ["sleep", "60"]})
        self.assertEqual(c.next()[0], si.STARTED)
        c.send(si.SIGNAL, b'{"signal":15}')
        self.assertEqual(c.run_to_end()[3], {"exit_code": 143})

    def test_missing_command_fails_at_exec(self):
        c = Client(self.path, {"args": ["no-such-command-xyz"]})
        frames, _, _, result = c.run_to_end()
        self.assertEqual(frames, [si.FAILED])
        self.assertEqual((result["stage"], result["errno"]), ("exec", 2))

    def test_bad_cwd_fails_at_cwd(self):
        _, _, _, result = Client(self.path, {"args": ["true"], "cwd": "/no/such/dir"}).run_to_end()
        self.assertEqual(result["stage"], "cwd")

    def test_bad_request_is_a_protocol_failure(self):
        _, _, _, result = Client(self.path, {"args": []}).run_to_end()
        self.assertEqual(result["stage"], "protocol")
        self.assertIn("args", result["message"])

    def test_many_processes_at_once(self):
        clients = [Client(self.path, {"args": ["sh", "-c", "sleep 0.2; echo %d" % i]}) for i in range(20)]
        for i, c in enumerate(clients):
            _, out, _, result = c.run_to_end()
            self.assertEqual((out, result), (b"%d\n" % i, {"exit_code": 0}))

    def test_large_output_arrives_whole(self):
        c = Client(self.path, {"args": [sys.executable, "-c", "import sys; sys.stdout.write('x' * 5000000)"]})
        _, out, _, result = c.run_to_end()
        self.assertEqual((len(out), result), (5000000, {"exit_code": 0}))

    def test_a_dropped_connection_kills_its_process(self):
        marker = os.path.join(self.dir, "survived")
        c = Client(self.path, {"args": ["sh", "-c", "sleep 1; touch %s" % marker]})
        self.assertEqual(c.next()[0], si.STARTED)
        c.sock.close()
        time.sleep(1.5)
        self.assertFalse(os.path.exists(marker))

    def test_sigterm_ends_children_then_the_server(self):
        c = Client(self.path, {"args": ["sleep", "60"]})
        self.assertEqual(c.next()[0], si.STARTED)
        self.server.send_signal(signal.SIGTERM)
        self.assertEqual(self.server.wait(10), 0)
        self.assertFalse(os.path.exists(self.path))
        self.assertEqual(c.run_to_end()[3], {"exit_code": 143})


if __name__ == "__main__":
    unittest.main()


class WarmHandOverTest(unittest.TestCase):
    """A pre-warmed sandbox's server (``--warm``): listening at once, serving only with the sandbox's env."""

    def setUp(self):
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "init.sock")
        self.agent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.agent.bind(os.path.join(self.dir, "warm.sock"))
        self.agent.listen(1)
        self.agent.settimeout(10)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "MY_SECRET": ""}
        self.server = subprocess.Popen(
            [sys.executable, "-u", "-I", INIT, self.path, "--warm", os.path.join(self.dir, "warm.sock")], env=env
        )
        self.addCleanup(self._stop)

    def _stop(self):
        if self.server.poll() is None:
            self.server.kill()
        self.server.wait()
        self.agent.close()
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)

    def test_processes_start_only_after_the_hand_over_and_get_its_env(self):
        conn, _ = self.agent.accept()
        self.assertTrue(os.path.exists(self.path), "listening before the hand-over")
        # Asked before the env came: accepted only once it has (the connection waits in the backlog).
        early = Client(self.path, {"args": ["sh", "-c", 'echo "$MY_SECRET:$(pwd)"'], "env": {}})
        cwd = os.path.realpath(self.dir)
        conn.sendall((json.dumps({"env": {"PATH": "/usr/bin:/bin", "MY_SECRET": "s3"}, "cwd": cwd}) + "\n").encode())
        conn.close()
        _, out, _, result = early.run_to_end()
        self.assertEqual((out, result), (("s3:%s\n" % cwd).encode(), {"exit_code": 0}))

    def test_an_agent_that_hangs_up_first_ends_it(self):
        conn, _ = self.agent.accept()
        conn.close()
        self.assertEqual(self.server.wait(10), 0)
