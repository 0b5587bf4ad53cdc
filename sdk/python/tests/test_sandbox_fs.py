"""A sandbox's filesystem methods against the fake gateway (a temporary directory as the container's root)."""

import datetime
import hashlib
import os
import tracemalloc

from berth import (
    SandboxConnectionError,
    SandboxFileInfo,
    SandboxFileReplacement,
    SandboxFileSearchMatch,
    SandboxFileSystemError,
)
from tests.sandbox_support import SandboxTestCase

MIB = 1 << 20


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MIB), b""):
            h.update(block)
    return h.hexdigest()


class SandboxFileSystemTest(SandboxTestCase):
    def setUp(self):
        super().setUp()
        self.sb = self.new()
        self.root = self.fake.sandboxes[self.sb.container_id].root

    def local(self, name, data=b""):
        path = os.path.join(self.tmp.name, name)
        with open(path, "wb") as f:
            f.write(data)
        self.addCleanup(lambda: os.path.exists(path) and os.unlink(path))
        return path

    def test_upload_stat_list_download(self):
        script = self.local("run.sh", b"#!/bin/sh\necho hi\n")
        os.chmod(script, 0o755)
        info = self.sb.fs.upload_file(script, "/app/bin/run.sh")
        self.assertIsInstance(info, SandboxFileInfo)
        self.assertEqual((info.name, info.path, info.size, info.is_dir), ("run.sh", "/app/bin/run.sh", 18, False))
        self.assertEqual((info.mode, info.permissions), (0o755, "-rwxr-xr-x"), "the permission bits travel")
        stat_info = self.sb.fs.stat_file("/app/bin/run.sh")
        self.assertEqual(stat_info.size, 18)
        self.assertIsInstance(stat_info.mod_time, datetime.datetime)
        self.assertIsNotNone(stat_info.mod_time.tzinfo)
        self.assertTrue(stat_info.owner and stat_info.group)
        self.assertEqual(stat_info.uid, os.getuid())
        self.sb.fs.upload_file(self.local("notes.txt", b"b"), "app/notes.txt")  # relative to "/"
        listed = self.sb.fs.list_files("/app")
        self.assertEqual([(f.name, f.is_dir) for f in listed], [("bin", True), ("notes.txt", False)])
        self.assertTrue(listed[0].permissions.startswith("d"))
        down = os.path.join(self.tmp.name, "down.sh")
        self.addCleanup(lambda: os.path.exists(down) and os.unlink(down))
        self.sb.fs.download_file("/app/bin/run.sh", down)
        with open(down, "rb") as f:
            self.assertEqual(f.read(), b"#!/bin/sh\necho hi\n")
        empty = self.local("empty", b"")
        self.assertEqual(self.sb.fs.upload_file(empty, "/empty").size, 0)
        self.sb.fs.download_file("/empty", down)
        self.assertEqual(os.path.getsize(down), 0)

    def test_large_files_move_in_blocks(self):
        size = 24 * MIB
        big = os.path.join(self.tmp.name, "big.bin")
        self.addCleanup(lambda: os.path.exists(big) and os.unlink(big))
        with open(big, "wb") as f:
            for i in range(size // MIB):
                f.write(bytes([i]) * MIB)
        down = big + ".down"
        self.addCleanup(lambda: os.path.exists(down) and os.unlink(down))
        tracemalloc.start()
        try:
            self.assertEqual(self.sb.fs.upload_file(big, "/data/big.bin").size, size)
            _, upload_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            self.sb.fs.download_file("/data/big.bin", down)
            _, download_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        # Python allocations of this process (the fake server's included) stay far below the file's size.
        self.assertLess(upload_peak, 8 * MIB)
        self.assertLess(download_peak, 8 * MIB)
        self.assertEqual(sha256_of(down), sha256_of(big))
        self.assertEqual(sha256_of(os.path.join(self.root, "data", "big.bin")), sha256_of(big))

    def test_directories_and_delete(self):
        info = self.sb.fs.create_directory("/work/a/b")
        self.assertEqual((info.path, info.is_dir), ("/work/a/b", True))
        self.assertTrue(os.path.isdir(os.path.join(self.root, "work", "a", "b")))
        self.assertEqual(self.sb.fs.create_directory("/work/a/b").is_dir, True, "mkdir -p")
        self.sb.fs.upload_file(self.local("f.txt", b"x"), "/work/a/f.txt")
        with self.assertRaises(SandboxFileSystemError) as cm:
            self.sb.fs.delete_file("/work/a")
        self.assertEqual((cm.exception.code, cm.exception.path), ("path_invalid", "/work/a"))
        with self.assertRaises(SandboxFileSystemError) as cm:
            self.sb.fs.create_directory("/work/a/f.txt")
        self.assertEqual(cm.exception.code, "path_invalid")
        with self.assertRaises(SandboxFileSystemError):
            self.sb.fs.delete_directory("/work/a/f.txt")
        self.assertIsNone(self.sb.fs.delete_file("/work/a/f.txt"))
        self.assertFalse(os.path.exists(os.path.join(self.root, "work", "a", "f.txt")))
        self.assertIsNone(self.sb.fs.delete_directory("/work"))
        self.assertFalse(os.path.exists(os.path.join(self.root, "work")))

    def test_missing_paths_name_the_path(self):
        attempts = {
            "stat_file": lambda p: self.sb.fs.stat_file(p),
            "list_files": lambda p: self.sb.fs.list_files(p),
            "delete_file": lambda p: self.sb.fs.delete_file(p),
            "delete_directory": lambda p: self.sb.fs.delete_directory(p),
            "download_file": lambda p: self.sb.fs.download_file(p, os.path.join(self.tmp.name, "never")),
            "find_in_files": lambda p: self.sb.fs.find_in_files(p, "x"),
            "replace_in_files": lambda p: self.sb.fs.replace_in_files(p, "x", "y"),
        }
        for name, attempt in attempts.items():
            with self.subTest(method=name):
                with self.assertRaises(SandboxFileSystemError) as cm:
                    attempt("/no/such/file")
                self.assertEqual((cm.exception.code, cm.exception.path), ("path_not_found", "/no/such/file"))
                self.assertIn("/no/such/file", str(cm.exception))
        self.assertFalse(os.path.exists(os.path.join(self.tmp.name, "never")), "a failed download leaves nothing")
        self.assertEqual([n for n in os.listdir(self.tmp.name) if n.startswith(".berth-download-")], [])

    def test_paths_outside_the_sandbox_are_refused_before_any_request(self):
        calls = len(self.sb.api.debug_entries())
        for path in ("../etc/passwd", "/../../etc/passwd", "/a/../../b", "", "a\x00b"):
            with self.subTest(path=path), self.assertRaises(SandboxFileSystemError) as cm:
                self.sb.fs.stat_file(path)
            self.assertEqual(cm.exception.code, "path_invalid")
        with self.assertRaises(SandboxFileSystemError) as cm:
            self.sb.fs.upload_file(self.local("x.txt", b"x"), "/../x.txt")
        self.assertEqual(cm.exception.path, "/../x.txt")
        self.assertIn("/../x.txt", str(cm.exception))
        self.assertEqual(len(self.sb.api.debug_entries()), calls)
        self.assertEqual(self.sb.fs.stat_file("/a/../").path, "/", "'..' inside the root is fine")
        with self.assertRaises(FileNotFoundError):
            self.sb.fs.upload_file(os.path.join(self.tmp.name, "not-here"), "/x")

    def test_find_and_replace(self):
        self.sb.fs.upload_file(self.local("a.py", b"x = 1  # TODO one\ny = 2\n# TODO two\n"), "/src/a.py")
        self.sb.fs.upload_file(self.local("b.py", b"print('TODO')\n"), "/src/sub/b.py")
        matches = self.sb.fs.find_in_files("/src", "TODO")
        self.assertEqual(len(matches), 3)
        self.assertIsInstance(matches[0], SandboxFileSearchMatch)
        first = matches[0]
        self.assertEqual((first.path, first.line), ("/src/a.py", "x = 1  # TODO one"))
        self.assertEqual((first.range.start.line, first.range.start.column, first.range.end.column), (1, 10, 14))
        self.assertEqual({m.path for m in matches}, {"/src/a.py", "/src/sub/b.py"})
        self.assertEqual(len(self.sb.fs.find_in_files("/src/a.py", r"TODO \w+")), 2)
        self.assertEqual(self.sb.fs.find_in_files("/src", "absent"), [])
        replaced = self.sb.fs.replace_in_files("/src", "TODO", "DONE")
        self.assertEqual(
            sorted(replaced, key=lambda r: r.path),
            [SandboxFileReplacement("/src/a.py", 2), SandboxFileReplacement("/src/sub/b.py", 1)],
        )
        with open(os.path.join(self.root, "src", "sub", "b.py")) as f:
            self.assertEqual(f.read(), "print('DONE')\n")
        with self.assertRaises(ValueError):
            self.sb.fs.find_in_files("/src", "")
        with self.assertRaises(ValueError):
            self.sb.fs.replace_in_files("/src", "", "x")

    def test_unknown_sandbox_on_the_byte_routes(self):
        self.sb.fs.upload_file(self.local("k.txt", b"k"), "/k.txt")
        self.fake.sandboxes[self.sb.container_id].stop()  # ended behind the SDK's back (its TTL, say)
        with self.assertRaises(SandboxConnectionError) as cm:
            self.sb.fs.download_file("/k.txt", os.path.join(self.tmp.name, "k.down"))
        self.assertEqual(cm.exception.code, "sandbox_terminated")
        with self.assertRaises(SandboxConnectionError):
            self.sb.fs.upload_file(self.local("k2.txt", b"k" * 100000), "/k.txt")
