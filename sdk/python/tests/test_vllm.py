"""integrations.VLLM and VLLMArgs: the args' command line, the deployment's config, and the container's
pass-through to vLLM's server process (driven here with a stand-in ``vllm`` package on loopback,
since vLLM itself cannot be installed on the test machine)."""

import asyncio
import importlib
import json
import os
import shutil
import sys
import tempfile
import textwrap
import unittest
from unittest import mock

from berth import QueueDepthAutoscaler, Volume, integrations
from berth.integrations import VLLM, VLLMArgs
from berth.integrations.vllm_server import MISSING_VLLM, VLLMServerApp
from berth.runtime.handler_load import resolve

APP = """
from berth import integrations
from berth.integrations import VLLMArgs

llm = integrations.VLLM(name="qwen-7b", gpu="A100", secrets=["HF_TOKEN"],
                        vllm_args=VLLMArgs(model="Qwen/Qwen2.5-7B-Instruct"))
bare = integrations.VLLM()
"""

# The stand-in for vLLM's server module, shared with the end-to-end test.
STANDIN = os.path.join(os.path.dirname(__file__), "..", "..", "..", "test", "fixtures", "inference", "vllm_standin_server.py")


def fake_vllm(root: str) -> None:
    pkg = os.path.join(root, "vllm", "entrypoints", "openai")
    os.makedirs(pkg)
    for d in ("vllm", "vllm/entrypoints", "vllm/entrypoints/openai"):
        open(os.path.join(root, d, "__init__.py"), "w").close()
    shutil.copyfile(STANDIN, os.path.join(pkg, "api_server.py"))


class VLLMArgsTest(unittest.TestCase):
    def test_defaults_map_to_vllms_command_line(self):
        self.assertEqual(
            VLLMArgs().to_cli(),
            [
                "--model", "facebook/opt-125m",
                "--served-model-name", "facebook/opt-125m",
                "--download-dir", "./vllm_cache",
            ],
        )  # fmt: skip

    def test_every_kind_of_field(self):
        args = VLLMArgs(
            model="Org/M-7B",
            served_model_name=["m7", "m7-chat"],
            trust_remote_code=True,
            dtype="bfloat16",
            max_model_len=4096,
            tensor_parallel_size=2,
            gpu_memory_utilization=0.85,
            enforce_eager=False,
            enable_prefix_caching=False,
            lora_modules=["sql=/loras/sql"],
            download_dir=None,
            extra_args=["--kv-cache-dtype", "fp8"],
        )
        self.assertEqual(
            args.to_cli("ignored-when-names-given"),
            [
                "--model", "Org/M-7B",
                "--served-model-name", "m7", "m7-chat",
                "--trust-remote-code",
                "--dtype", "bfloat16",
                "--max-model-len", "4096",
                "--tensor-parallel-size", "2",
                "--gpu-memory-utilization", "0.85",
                "--no-enable-prefix-caching",
                "--lora-modules", "sql=/loras/sql",
                "--kv-cache-dtype", "fp8",
            ],
        )  # fmt: skip
        self.assertIn("--enable-prefix-caching", VLLMArgs(enable_prefix_caching=True).to_cli())

    def test_served_names_default_to_the_deployment_name_and_the_model(self):
        self.assertEqual(VLLMArgs(model="Qwen/Q").served_names("qwen"), ["qwen", "Qwen/Q"])
        self.assertEqual(VLLMArgs(model="Qwen/Q").served_names(None), ["Qwen/Q"])
        self.assertEqual(VLLMArgs(model="q").served_names("q"), ["q"])
        self.assertEqual(VLLMArgs(served_model_name="only").served_names("dep"), ["only"])

    def test_bad_args_are_refused(self):
        with self.assertRaisesRegex(ValueError, "must name a model"):
            VLLMArgs(model="")
        with self.assertRaisesRegex(TypeError, "trust_remote_code must be True or False"):
            VLLMArgs(trust_remote_code="yes")
        with self.assertRaisesRegex(TypeError, "extra_args must be a list"):
            VLLMArgs(extra_args="--foo")
        with self.assertRaisesRegex(ValueError, "is not a model name"):
            VLLMArgs(served_model_name="bad name").served_names()
        with self.assertRaisesRegex(TypeError, "vllm_args must be a berth.integrations.VLLMArgs"):
            VLLM(vllm_args={"model": "x"})
        with self.assertRaisesRegex(ValueError, "keep_warm_seconds"):
            VLLM(keep_warm_seconds=-2)


class VLLMDeploymentTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp()
        with open(os.path.join(self.dir, "vllm_app.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        sys.path.insert(0, self.dir)
        self.addCleanup(sys.path.remove, self.dir)
        self.addCleanup(sys.modules.pop, "vllm_app", None)
        self.mod = importlib.import_module("vllm_app")

    def test_the_spec_defaults(self):
        v = self.mod.bare
        self.assertIs(integrations.VLLM, VLLM)
        self.assertEqual(v.stub_type, "asgi")
        self.assertEqual(v.stub_name, "bare")
        config, extra = v.stub_config(), v.stub_extra("sha")
        self.assertEqual(config["runtime"]["cpu"], 1.0)
        self.assertEqual(config["runtime"]["memory"], 128)
        self.assertEqual(config["runtime"]["gpu"], "")
        self.assertEqual(config["workers"], 1)
        self.assertEqual(extra["concurrent_requests"], 1)
        self.assertEqual(config["keep_warm_seconds"], 60)
        self.assertEqual(config["max_pending_tasks"], 100)
        self.assertEqual(config["task_policy"]["timeout"], 3600)
        self.assertIs(config["authorized"], True)
        self.assertEqual(config["autoscaler"], QueueDepthAutoscaler().to_config())
        self.assertEqual(config["volumes"], [Volume(name="vllm_cache", mount_path="./vllm_cache").config()])
        self.assertEqual(extra["secrets"], [])
        self.assertEqual(sorted(v.image.python_packages), ["fastapi", "huggingface_hub", "vllm"])
        self.assertEqual(extra["served_models"], ["facebook/opt-125m"])
        self.assertEqual(config["handler"], "vllm_app:bare")

    def test_the_issues_example(self):
        v = self.mod.llm
        config, extra = v.stub_config(), v.stub_extra("sha")
        self.assertEqual(v.stub_name, "qwen-7b")
        self.assertEqual(config["runtime"]["gpu"], "A100")
        self.assertEqual(extra["secrets"], ["HF_TOKEN"])
        self.assertEqual(extra["served_models"], ["qwen-7b", "Qwen/Qwen2.5-7B-Instruct"])
        self.assertEqual(
            v.command(),
            ["--model", "Qwen/Qwen2.5-7B-Instruct", "--served-model-name", "qwen-7b", "Qwen/Qwen2.5-7B-Instruct",
             "--download-dir", "./vllm_cache"],
        )  # fmt: skip
        self.assertEqual(v.serve_target(), os.path.join(os.path.realpath(self.dir), "vllm_app.py") + ":llm")
        # The container's runner finds the object by its variable and gets the app factory.
        self.assertEqual(resolve(config["handler"], "BERTH_HANDLER"), v.func)

    def test_a_given_image_and_volumes_are_used_as_given(self):
        from berth import Image

        image = Image.from_registry("registry.local/vllm-openai:latest")
        v = VLLM(image=image, volumes=[], autoscaler=QueueDepthAutoscaler(max_containers=3))
        self.assertIs(v.image, image)
        self.assertEqual(v.image.python_packages, [])
        self.assertEqual(v.stub_config(_loc())["volumes"], [])
        self.assertEqual(v.autoscaler.max_containers, 3)

    def test_an_object_not_at_module_level_is_refused_with_the_fix(self):
        def build():
            return VLLM()

        with self.assertRaisesRegex(Exception, "assign it at module level"):
            build().location()

    def test_without_vllm_in_the_image_starting_fails_naming_the_fix(self):
        # sys.modules[name] = None is Python's own "this module cannot be imported".
        with mock.patch.dict(sys.modules, {"vllm": None}):
            with self.assertRaises(RuntimeError) as caught:
                self.mod.llm.func()
        self.assertEqual(str(caught.exception), MISSING_VLLM)
        self.assertIn("add_python_packages(['vllm'])", MISSING_VLLM)


def _loc():
    from berth.api.locate import Location

    return Location(root="/tmp", module="m", qualname="v")


class Collected:
    def __init__(self, messages):
        self.inbox = list(messages)
        self.sent = []

    async def receive(self):
        return self.inbox.pop(0)

    async def send(self, message):
        self.sent.append(message)


class VLLMServerAppTest(unittest.TestCase):
    """The pass-through against a process started the way vLLM's is, on loopback."""

    def setUp(self):
        self.root = tempfile.mkdtemp()
        fake_vllm(self.root)
        sys.path.insert(0, self.root)
        self.addCleanup(sys.path.remove, self.root)
        importlib.invalidate_caches()
        env = mock.patch.dict(os.environ, {"PYTHONPATH": self.root})
        env.start()
        self.addCleanup(env.stop)

    def run_app(self, app, scope, messages):
        c = Collected(messages)
        asyncio.run(app(scope, c.receive, c.send))
        return c.sent

    def test_streams_a_chat_completion_chunk_by_chunk_and_stops_the_server(self):
        app = VLLMServerApp(VLLMArgs(model="tiny").to_cli("tiny-chat"), startup_timeout_s=60)

        async def scenario():
            # The lifespan scope stays open while requests are served, as in berth's ASGI host.
            inbox, life_sent = asyncio.Queue(), []

            async def life_send(message):
                life_sent.append(message)

            inbox.put_nowait({"type": "lifespan.startup"})
            life = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, life_send))
            while not life_sent:
                await asyncio.sleep(0.05)
            self.assertEqual(life_sent, [{"type": "lifespan.startup.complete"}])
            try:
                body = b'{"model": "tiny-chat", "stream": true, "messages": [{"role": "user", "content": "one two three"}]}'
                scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "query_string": b"",
                         "headers": [(b"content-type", b"application/json"), (b"authorization", b"Bearer x")]}
                http = Collected([{"type": "http.request", "body": body, "more_body": False}])
                await app(scope, http.receive, http.send)
                wrong = Collected([{"type": "http.request", "body": b'{"model": "other", "messages": []}'}])
                await app(scope, wrong.receive, wrong.send)
            finally:
                inbox.put_nowait({"type": "lifespan.shutdown"})
                await life
            return http.sent, wrong.sent, life_sent[1:]

        sent, wrong, down = asyncio.run(scenario())
        start = sent[0]
        self.assertEqual(start["status"], 200)
        names = [n for n, _ in start["headers"]]
        self.assertIn(b"content-type", names)
        self.assertNotIn(b"transfer-encoding", names, "hop-by-hop headers are the connection's own")
        events = [m["body"] for m in sent[1:] if m["body"]]
        self.assertEqual(len(events), 4, "one body message per chunk vLLM wrote")
        self.assertIn(b'"content": "two"', events[1])
        self.assertEqual(events[3], b"data: [DONE]\n\n")
        self.assertIs(sent[-1]["more_body"], False)
        self.assertEqual(wrong[0]["status"], 404, "vLLM's own errors pass through")
        self.assertEqual(down, [{"type": "lifespan.shutdown.complete"}])
        self.assertIsNotNone(app.process.poll(), "the vLLM process is stopped at shutdown")

    def test_a_caller_that_goes_away_aborts_vllms_generation(self):
        app = VLLMServerApp(VLLMArgs(model="tiny").to_cli(), startup_timeout_s=60)

        async def scenario():
            inbox, life_sent = asyncio.Queue(), []

            async def life_send(message):
                life_sent.append(message)

            inbox.put_nowait({"type": "lifespan.startup"})
            life = asyncio.ensure_future(app({"type": "lifespan"}, inbox.get, life_send))
            while not life_sent:
                await asyncio.sleep(0.05)
            try:
                body = b'{"model": "tiny", "stream": true, "max_tokens": 500, "messages": [{"content": "a b"}]}'
                scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
                got = []

                async def send(message):
                    got.append(message)
                    if len(got) == 3:  # berth's ASGI host raises on a send once its client has gone
                        raise ConnectionResetError("the client went away")

                with self.assertRaises(ConnectionResetError):
                    await app(scope, Collected([{"type": "http.request", "body": body}]).receive, send)
                while True:  # vLLM notices on its next write
                    stats = Collected([{"type": "http.request", "body": b""}])
                    await app({"type": "http", "method": "GET", "path": "/stats", "headers": []}, stats.receive,
                              stats.send)
                    counts = json.loads(stats.sent[1]["body"])
                    if counts["aborted"]:
                        return counts
                    await asyncio.sleep(0.1)
            finally:
                inbox.put_nowait({"type": "lifespan.shutdown"})
                await life

        self.assertEqual(asyncio.run(scenario()), {"aborted": 1, "finished": 0})

    def test_a_server_that_exits_while_starting_fails_startup_with_its_output(self):
        app = VLLMServerApp(["--fail"], startup_timeout_s=60)
        sent = self.run_app(app, {"type": "lifespan"}, [{"type": "lifespan.startup"}])
        self.assertEqual(sent[0]["type"], "lifespan.startup.failed")
        self.assertIn("vLLM exited with status 3", sent[0]["message"])
        self.assertIn("CUDA error: no device", sent[0]["message"])


if __name__ == "__main__":
    unittest.main()
