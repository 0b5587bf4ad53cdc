"""``python3 -m berth.client.describe FILE.py:OBJECT``, run as a subprocess over temporary files."""

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import unittest

SDK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

APP = '''
import sys
from berth import Image, QueueDepthAutoscaler, endpoint, function, schedule

print("printed while importing")
print("to stderr too", file=sys.stderr)

@endpoint(name="predictor", autoscaler=QueueDepthAutoscaler(max_containers=3, tasks_per_container=2))
def predict(x, context=None):
    return x

@function(cpu=2)
def square(x):
    return x * x

@schedule(when="@hourly")
def tick():
    pass

@function(image=Image(base_image="docker.io/library/python:3.11").add_python_packages(["numpy"]))
def needs_build():
    pass

def helper():
    pass

class Thing:
    pass

answer = 42

if __name__ == "__main__":
    open(__file__ + ".main-ran", "w").close()
'''


class DescribeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        self.dir = os.path.join(self.tmp.name, "project")
        os.mkdir(self.dir)
        self.write("app.py", APP)
        self.write("README.txt", "synced too")

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        return path

    def describe(self, *args, cwd=None, env=None):
        env = dict(os.environ, PYTHONPATH=SDK, **(env or {}))
        env.pop("BERTH_REMOTE", None)
        p = subprocess.run(
            [sys.executable, "-m", "berth.client.describe", *args],
            cwd=cwd or self.tmp.name,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), 1, f"one JSON line on stdout, got {p.stdout!r} (stderr {p.stderr!r})")
        return p.returncode, json.loads(lines[0]), p.stderr

    def failure(self, *args):
        code, out, stderr = self.describe(*args)
        self.assertEqual((code, out["ok"]), (2, False), out)
        self.assertNotIn("Traceback", stderr, "describe's own errors are not stack traces")
        return out

    def test_endpoint(self):
        code, out, stderr = self.describe("project/app.py:predict")
        self.assertEqual(code, 0, out)
        self.assertEqual(
            {k: out[k] for k in ("ok", "type", "name", "root", "handler")},
            {"ok": True, "type": "endpoint", "name": "predictor", "root": self.dir, "handler": "app:predict"},
        )
        self.assertEqual(out["config"]["autoscaler"], {"type": "queue_depth", "max_containers": 3, "tasks_per_container": 2})
        self.assertEqual((out["config"]["authorized"], out["config"]["keep_warm_seconds"]), (True, 180))
        self.assertEqual(out["extra"]["code_sha256"], "")
        self.assertEqual(out["extra"]["handler_params"], {"names": ["x"], "required": ["x"], "var_keyword": False, "context": True})
        self.assertIn("printed while importing", stderr, "the module's prints go to stderr")
        self.assertIn("to stderr too", stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "app.py.main-ran")), "the main guard did not run")

    def test_name_option_overrides_the_decorator(self):
        for args in (["--name", "other"], ["--name=other"]):
            code, out, _ = self.describe(*args, "project/app.py:predict")
            self.assertEqual((code, out["name"]), (0, "other"))

    def test_function_and_schedule(self):
        code, out, _ = self.describe(os.path.join(self.dir, "app.py") + ":square")
        self.assertEqual((code, out["type"], out["name"], out["handler"]), (0, "function", "square", "app:square"))
        self.assertEqual(out["extra"]["cpu_millicores"], 2000)
        code, out, _ = self.describe("project/app.py:tick")
        self.assertEqual((code, out["type"], out["extra"]["when"]), (0, "schedule", "@hourly"))

    def test_archive_of_the_root(self):
        archive = os.path.join(self.tmp.name, "code.tar.gz")
        code, out, _ = self.describe("project/app.py:predict", "--archive", archive)
        self.assertEqual(code, 0, out)
        with open(archive, "rb") as f:
            data = f.read()
        self.assertEqual(out["extra"]["code_sha256"], hashlib.sha256(data).hexdigest())
        sys.path.insert(0, SDK)
        try:
            from tests.test_sync import names_in
        finally:
            sys.path.remove(SDK)
        self.assertIn("README.txt", names_in(data))
        self.assertEqual(out["archive_files"], len([n for n in names_in(data) if not n.endswith("/")]))

    def test_package_module_root_is_the_files_directory(self):
        pkg = os.path.join(self.dir, "pkg")
        os.mkdir(pkg)
        self.write("pkg/__init__.py", "")
        self.write("pkg/api.py", "from berth import endpoint\n@endpoint\ndef hello(**kw):\n    return kw\n")
        code, out, _ = self.describe("project/pkg/api.py:hello")
        self.assertEqual((code, out["root"], out["handler"]), (0, pkg, "api:hello"))

    def test_missing_file(self):
        out = self.failure("project/nope.py:predict")
        self.assertIn("no such file: project/nope.py", out["error"])

    def test_import_error_carries_the_message(self):
        self.write("broken.py", "import os\nraise ValueError('kaboom at import')\n")
        out = self.failure("project/broken.py:x")
        self.assertIn("cannot import", out["error"])
        self.assertIn("ValueError: kaboom at import", out["error"])
        self.assertIn("broken.py", out["traceback"])
        self.write("syntax.py", "def (:\n")
        self.assertIn("SyntaxError", self.failure("project/syntax.py:x")["error"])
        self.write("exits.py", "import sys\nsys.exit(3)\n")
        self.assertIn("SystemExit", self.failure("project/exits.py:x")["error"])

    def test_missing_object_lists_what_is_there(self):
        out = self.failure("project/app.py:predikt")
        self.assertIn("has no object named predikt", out["error"])
        self.assertIn("needs_build, predict, square, tick", out["error"])
        self.write("empty.py", "x = 1\n")
        self.assertIn("it has none", self.failure("project/empty.py:y")["error"])

    def test_not_deployable_says_what_it_is(self):
        for attr, what in (("helper", "a plain function"), ("Thing", "a class"), ("answer", "an int")):
            out = self.failure(f"project/app.py:{attr}")
            self.assertIn(f"{attr} in project/app.py is {what}, not deployable", out["error"])
            self.assertIn("@endpoint", out["error"])

    def coordinator_that_builds(self, fail_step=None):
        """A fake coordinator whose image build route streams the steps of the request (failing at fail_step)."""
        from tests.fake_gateway import FakeGateway

        gw = FakeGateway()
        self.addCleanup(gw.close)
        gw.builds = []

        def route(h, method):
            if method == "GET" and h.path == "/api/v1/workspace/current":
                h.send_json({"external_id": "ws-test", "name": "test"})
                return True
            if method != "POST" or not re.match(r"^/api/v1/image/ws-test/build$", h.path):
                return False
            spec = json.loads(h.body())["image"]
            gw.builds.append(spec)
            names = spec["commands"] + ["ensure pip", "pip install " + " ".join(spec["python_packages"])]
            lines = [{"event": "base", "image_id": "img-built", "base_image": spec["base_image"], "base_digest": "sha256:b"}]
            for i, name in enumerate(names, 1):
                lines.append({"event": "step", "step": i, "total": len(names), "name": name, "cached": False})
                lines.append({"event": "output", "step": i, "stream": "stdout", "line": f"running {name}"})
                if i == fail_step:
                    message = f"build step {i}/{len(names)} ({name}) exited with code 3; its last output: running {name}"
                    lines.append({"event": "error", "error": {"code": "image_build_failed", "message": message}})
                    break
                lines.append({"event": "step_done", "step": i, "cached": False, "seconds": 1.5})
            else:
                image = {"image_id": "img-built", "status": "ready", "ref": "localhost/berth-build-cache:k", "steps": names}
                lines.append({"event": "image", "image": image, "env": {}})
            raw = "".join(json.dumps(x) + "\n" for x in lines).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/x-ndjson")
            h.send_header("Content-Length", str(len(raw)))
            h.end_headers()
            h.wfile.write(raw)
            return True

        gw.routes.append(route)
        return gw, {"BERTH_URL": gw.url, "SERVICE_TOKEN": "bt_test", "BERTH_CONFIG": os.path.join(self.tmp.name, "none.json")}

    def test_image_that_needs_a_build_is_built_first(self):
        gw, env = self.coordinator_that_builds()
        code, out, stderr = self.describe("project/app.py:needs_build", env=env)
        self.assertEqual(code, 0, out)
        self.assertEqual(out["extra"]["image_ref"], "localhost/berth-build-cache:k", "the stub runs the built image")
        self.assertEqual([b["python_packages"] for b in gw.builds], [["numpy"]])
        self.assertIn("step 2/2 pip install numpy", stderr, "progress on stderr: stdout is the answer")
        self.assertIn("step 2 pip install numpy … built in 1.5 s", stderr)

    def test_a_failing_build_fails_describe_naming_the_step(self):
        gw, env = self.coordinator_that_builds(fail_step=2)
        code, out, stderr = self.describe("project/app.py:needs_build", env=env)
        self.assertEqual((code, out["ok"]), (2, False), out)
        self.assertIn("ImageBuildError: building the image failed: build step 2/2 (pip install numpy) exited with code 3", out["error"])
        self.assertNotIn("Traceback", stderr)

    def test_bad_arguments(self):
        self.assertIn("usage", self.failure()["error"])
        self.assertIn("FILE.py:OBJECT", self.failure("project/app.py")["error"])
        self.assertIn("unknown option --colour", self.failure("project/app.py:predict", "--colour")["error"])
        self.assertIn("--name needs a value", self.failure("project/app.py:predict", "--name")["error"])
        self.assertIn("unexpected argument", self.failure("project/app.py:predict", "extra")["error"])
        self.write("notes.txt", "")
        self.assertIn("not a .py file", self.failure("project/notes.txt:x")["error"])

    def test_file_names_that_cannot_be_imported_in_the_container(self):
        self.write("my-app.py", "")
        self.assertIn("rename it", self.failure("project/my-app.py:x")["error"])
        self.write("json.py", "")
        self.assertIn("'json'", self.failure("project/json.py:x")["error"])


if __name__ == "__main__":
    unittest.main()
