"""The .berthignore matcher and the deterministic code archive."""

import gzip
import io
import os
import socket
import tarfile
import tempfile
import unittest

from berth.errors import BerthError
from berth.client.ignore import IgnoreMatcher
from berth.client import sync


def names_in(data: bytes):
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return [m.name + ("/" if m.isdir() else "") for m in tar.getmembers()]


def matcher(text: str, defaults=()):
    return IgnoreMatcher(text.splitlines(), defaults)


class IgnoreTest(unittest.TestCase):
    def check(self, text, cases, defaults=()):
        m = matcher(text, defaults)
        for path, is_dir, expected in cases:
            self.assertEqual(m.ignored(path, is_dir), expected, f"{text!r} on {path} (dir={is_dir})")

    def test_comments_blank_lines_and_escapes(self):
        self.check(
            "# a comment\n\n\\#hash\n\\!bang\nspace\\ \ntrail   \n",
            [("# a comment", False, False), ("#hash", False, True), ("!bang", False, True),
             ("space ", False, True), ("space", False, False), ("trail", False, True)],
        )

    def test_unanchored_names_match_at_any_depth(self):
        self.check("*.log\nbuild\n", [("a.log", False, True), ("x/y/a.log", False, True), ("build", True, True),
                                       ("src/build", False, True), ("buildx", False, False), ("a.log.txt", False, False)])

    def test_dir_only(self):
        self.check("cache/\n", [("cache", True, True), ("cache", False, False), ("a/cache", True, True)])

    def test_anchoring_by_leading_or_middle_slash(self):
        self.check("/top.txt\ndoc/frotz\n", [("top.txt", False, True), ("sub/top.txt", False, False),
                                             ("doc/frotz", False, True), ("a/doc/frotz", False, False)])

    def test_wildcards_do_not_cross_slashes(self):
        self.check("a/*.py\nf?o\n[abc]x\n[!0-9]y\n", [("a/m.py", False, True), ("a/b/m.py", False, False),
                                                     ("foo", False, True), ("fo/o", False, False), ("bx", False, True),
                                                     ("dx", False, False), ("zy", False, True), ("3y", False, False)])

    def test_double_star(self):
        self.check("**/logs\na/**/b\nout/**\n", [("logs", True, True), ("x/y/logs", True, True), ("a/b", False, True),
                                                  ("a/x/y/b", False, True), ("ab", False, False), ("out/x/y", False, True),
                                                  ("out", True, False)])

    def test_negation_and_last_match_wins(self):
        self.check("*.txt\n!keep.txt\n", [("a.txt", False, True), ("keep.txt", False, False), ("d/keep.txt", False, False)])

    def test_defaults_can_be_negated(self):
        m = IgnoreMatcher(["!venv/"])
        self.assertFalse(m.ignored("venv", True))
        self.assertTrue(m.ignored(".git", True))
        self.assertTrue(m.ignored("x/__pycache__", True))
        self.assertTrue(m.ignored("m.pyc", False))
        self.assertTrue(m.ignored(".venv", True))


class ArchiveTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = os.path.join(self.tmp.name, "app")
        files = {
            "app.py": "print(1)\n",
            "pkg/__init__.py": "",
            "pkg/mod.py": "x = 1\n",
            "pkg/__pycache__/mod.cpython-311.pyc": "junk",
            ".git/HEAD": "ref",
            "data/big.bin": "0" * 1000,
            "data/keep.bin": "1",
            "notes.txt": "n",
            "run.sh": "#!/bin/sh\n",
            ".berthignore": "# data\ndata/*\n!data/keep.bin\n*.txt\n",
        }
        for rel, text in files.items():
            path = os.path.join(self.root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        os.chmod(os.path.join(self.root, "run.sh"), 0o700)
        os.symlink("/etc/passwd", os.path.join(self.root, "link"))
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(os.path.join(self.root, "s.sock"))

    def tearDown(self):
        self.sock.close()
        self.tmp.cleanup()

    def test_same_bytes_twice_and_ignored_files_absent(self):
        a = sync.pack(self.root)
        os.utime(os.path.join(self.root, "app.py"), (1, 1))
        b = sync.pack(self.root)
        self.assertEqual(a.data, b.data)
        self.assertEqual(a.sha256, b.sha256)
        self.assertEqual(
            names_in(a.data),
            [".berthignore", "app.py", "data/", "data/keep.bin", "pkg/", "pkg/__init__.py", "pkg/mod.py", "run.sh"],
        )
        self.assertEqual(list(a.names), names_in(a.data))

    def test_headers_are_normalised(self):
        data = sync.pack(self.root).data
        self.assertEqual(data[4:8], b"\0\0\0\0", "gzip mtime is 0")
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for m in tar.getmembers():
                self.assertEqual((m.mtime, m.uid, m.gid, m.uname, m.gname), (0, 0, 0, "", ""), m.name)
                self.assertTrue(m.isfile() or m.isdir())
                want = 0o755 if m.isdir() or m.name == "run.sh" else 0o644
                self.assertEqual(m.mode, want, m.name)
        self.assertEqual(gzip.decompress(data)[:6], b".berth")

    def test_content_change_changes_the_hash(self):
        a = sync.pack(self.root)
        with open(os.path.join(self.root, "app.py"), "a") as f:
            f.write("print(2)\n")
        self.assertNotEqual(a.sha256, sync.pack(self.root).sha256)

    def test_limit(self):
        with self.assertRaises(BerthError) as ctx:
            sync.pack(self.root, limit=10)
        self.assertEqual(ctx.exception.code, "object_too_large")
        self.assertIn("10 B code sync limit", str(ctx.exception))
        self.assertIn(".berthignore", str(ctx.exception))
        self.assertIn("BERTH_CODE_SYNC_MAX", str(ctx.exception))

    def test_limit_from_the_environment(self):
        cases = {
            "": sync.DEFAULT_MAX_ARCHIVE_BYTES,
            "2048": 2048,
            "64MiB": 64 * 1024 * 1024,
            "1.5 M": int(1.5 * 1024 * 1024),
            "256mib": 256 * 1024 * 1024,
            "10k": 10 * 1024,
        }
        old = os.environ.get(sync.MAX_ENV)
        try:
            for raw, want in cases.items():
                os.environ[sync.MAX_ENV] = raw
                self.assertEqual(sync.max_archive_bytes(), want, raw)
            for bad in ("lots", "10 parsecs", "0", "-5M", "257MiB", "1G"):
                os.environ[sync.MAX_ENV] = bad
                with self.assertRaises(BerthError, msg=bad) as ctx:
                    sync.max_archive_bytes()
                self.assertEqual(ctx.exception.code, "invalid_request")
                self.assertIn(sync.MAX_ENV, str(ctx.exception))
            # pack reads it when no limit is given.
            os.environ[sync.MAX_ENV] = "10"
            with self.assertRaises(BerthError) as ctx:
                sync.pack(self.root)
            self.assertEqual(ctx.exception.code, "object_too_large")
        finally:
            if old is None:
                os.environ.pop(sync.MAX_ENV, None)
            else:
                os.environ[sync.MAX_ENV] = old
        self.assertEqual(sync.DEFAULT_MAX_ARCHIVE_BYTES, 100 * 1024 * 1024)

    def test_default_ignores_leave_dependencies_and_build_outputs_out(self):
        for rel in (
            "node_modules/left-pad/index.js",
            "web/node_modules/react/index.js",
            "dist/app.js",
            "build/lib/x.py",
            "pkg.egg-info/PKG-INFO",
            ".venv/bin/python",
            ".pytest_cache/v/x",
            ".DS_Store",
        ):
            path = os.path.join(self.root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write("x" * 100)
        names = sync.pack(self.root).names
        for left_out in ("node_modules/", "web/node_modules/", "dist/", "build/", "pkg.egg-info/", ".venv/", ".pytest_cache/", ".DS_Store"):
            self.assertNotIn(left_out, names)
        self.assertIn("web/", names)
        # A `!` line in .berthignore takes a default back.
        with open(os.path.join(self.root, ".berthignore"), "a") as f:
            f.write("!dist/\n")
        self.assertIn("dist/app.js", sync.pack(self.root).names)


class SyncCodeTest(unittest.TestCase):
    """sync_code says what it uploads, and uploads once per content."""

    class FakeCoordinator:
        url = "http://coordinator.test"

        def __init__(self):
            self.objects = {}

        def object_exists(self, sha):
            return sha in self.objects, None

        def put_object(self, sha, data, size):
            self.objects[sha] = data

    def test_upload_prints_the_size_once(self):
        import contextlib

        with tempfile.TemporaryDirectory() as root:
            with open(os.path.join(root, "app.py"), "w") as f:
                f.write("print(1)\n" * 100)
            coordinator = self.FakeCoordinator()
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                sha = sync.sync_code(coordinator, root)
                again = sync.sync_code(coordinator, root)
            self.assertEqual(sha, again)
            self.assertEqual(list(coordinator.objects), [sha])
            lines = err.getvalue().splitlines()
            self.assertEqual(len(lines), 1, lines)
            self.assertRegex(lines[0], r"^berth: uploading the code of .+: \d+(\.\d)? (B|KiB) \(1 files\)$")

if __name__ == "__main__":
    unittest.main()
