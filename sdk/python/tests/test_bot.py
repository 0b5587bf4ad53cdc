"""Bot, BotLocation and @bot.transition: spec defaults, checks, and a transition run as a function task."""

import importlib
import os
import sys
import tempfile
import textwrap
import unittest
from dataclasses import dataclass
from unittest import mock

import berth
from berth import Bot, BotContext, BotLocation, Image
from berth.errors import BerthError
from tests.fake_gateway import FakeGateway

APP = '''
from dataclasses import dataclass
from berth import Bot, BotLocation, Image

@dataclass
class Question:
    text: str

@dataclass
class Answer:
    text: str

@dataclass
class Hidden:
    n: int

bot = Bot(model="tiny-bigram", name="helper", locations=[BotLocation(marker=Question), BotLocation(marker=Answer)])

@bot.transition(inputs={Question: 1}, outputs=[Answer], description="answers one question", cpu=0.5, memory="256Mi",
                image=Image.from_registry("docker.io/library/python:3.11-slim"))
def answer(context, inputs):
    return {Answer: [Answer(text=inputs[Question][0].text.upper())]}

@bot.transition(inputs={Answer: 2}, outputs=[Question])
def wrong(context, inputs):
    """Returns a type it did not declare."""
    return {Answer: inputs[Answer]}
'''


@dataclass
class Q:
    text: str


@dataclass
class A:
    text: str


class BotOptionsTest(unittest.TestCase):
    def test_spec_defaults(self):
        bot = Bot()
        self.assertIsNone(bot.model)
        self.assertIsNone(bot.api_key)
        self.assertEqual(bot.locations, [])
        self.assertIsNone(bot.description)
        self.assertIs(bot.authorized, True, "berth's pick where the spec lists both (docs/bots.md)")
        self.assertEqual((bot.cpu, bot.cpu_millicores, bot.memory), (1, 1000, 128))
        self.assertIsNone(bot.gpu_option)
        self.assertIsInstance(bot.image, Image)
        self.assertEqual((bot.timeout, bot.workers, bot.keep_warm_seconds), (180, 1, 300))
        self.assertEqual((bot.max_pending_tasks, bot.retries), (100, 3))
        self.assertIsNone(bot.on_start)
        self.assertIsNone(bot.volumes)
        self.assertEqual(bot.secrets, [])
        self.assertIsNone(bot.name)
        self.assertIs(BotLocation(marker=Q).expose, True)

    def test_bad_options_name_the_cause(self):
        with self.assertRaisesRegex(TypeError, "marker must be a data model type"):
            BotLocation(marker="Q")
        with self.assertRaisesRegex(TypeError, "expose must be a bool"):
            BotLocation(marker=Q, expose="no")
        with self.assertRaisesRegex(ValueError, "two locations for the marker type Q"):
            Bot(locations=[BotLocation(Q), BotLocation(Q, expose=False)])
        with self.assertRaisesRegex(TypeError, "locations must be BotLocation"):
            Bot(locations=[Q])
        with self.assertRaisesRegex(ValueError, "timeout"):
            Bot(timeout=0)
        with self.assertRaisesRegex(TypeError, "authorized must be a bool"):
            Bot(authorized="yes")
        with self.assertRaisesRegex(TypeError, "image must be a berth.Image"):
            Bot(image="python:3.11")

    def test_transition_declarations_are_checked(self):
        bot = Bot(locations=[BotLocation(Q)])
        with self.assertRaisesRegex(ValueError, "output A has no location in the bot"):
            bot.transition(inputs={Q: 1}, outputs=[A])(lambda c, i: {})
        with self.assertRaisesRegex(ValueError, "the count of Q must be an int >= 1"):
            bot.transition(inputs={Q: 0}, outputs=[])(lambda c, i: {})
        with self.assertRaisesRegex(ValueError, "inputs must be a non-empty mapping"):
            bot.transition(inputs={}, outputs=[Q])(lambda c, i: {})
        with self.assertRaisesRegex(ValueError, "outputs must be a list"):
            bot.transition(inputs={Q: 1}, outputs=Q)(lambda c, i: {})

        def same(c, i):
            return {}

        bot.transition(inputs={Q: 1}, outputs=[Q])(same)
        with self.assertRaisesRegex(ValueError, "already has a transition named same"):
            bot.transition(inputs={Q: 1}, outputs=[Q])(same)


class BotTransitionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.gw = FakeGateway()
        cls.dir = tempfile.TemporaryDirectory()
        with open(os.path.join(cls.dir.name, "app_bot.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        cls.env = mock.patch.dict(
            os.environ,
            {"BERTH_URL": cls.gw.url, "SERVICE_TOKEN": "bt_test", "BERTH_CONFIG": os.path.join(cls.dir.name, "none.json")},
        )
        cls.env.start()
        sys.path.insert(0, cls.dir.name)
        cls.app = importlib.import_module("app_bot")
        # The fake runs the task here: the handler's module-level function, as the container's runner would.
        cls.gw.behaviours["helper.answer"] = lambda ctx, inputs: ([], "COMPLETE", cls.app.answer.func(ctx, inputs))
        cls.gw.behaviours["helper.wrong"] = lambda ctx, inputs: ([], "COMPLETE", cls.app.wrong.func(ctx, inputs))

    @classmethod
    def tearDownClass(cls):
        sys.path.remove(cls.dir.name)
        sys.modules.pop("app_bot", None)
        cls.env.stop()
        cls.gw.close()
        cls.dir.cleanup()

    def test_a_transition_is_a_function_stub_with_its_own_resources(self):
        app = self.app
        self.assertIsInstance(app.answer, berth.Function)
        self.assertEqual(app.bot.transitions, {"answer": app.answer, "wrong": app.wrong})
        self.assertEqual(app.answer.stub_name, "helper.answer")
        self.assertEqual(app.answer.description, "answers one question")
        self.assertEqual(app.wrong.description, "Returns a type it did not declare.")
        config = app.answer.stub_config()
        self.assertEqual(config["handler"], "app_bot:answer")
        self.assertEqual(config["runtime"]["memory"], 256)
        self.assertEqual(app.answer.cpu_millicores, 500)
        self.assertEqual(config["task_policy"]["timeout"], 180, "the bot's timeout")
        self.assertEqual(config["keep_warm_seconds"], 300)
        self.assertEqual(app.wrong.memory, 128, "the bot's memory where the transition gives none")

    def test_remote_runs_a_task_and_returns_checked_markers(self):
        app = self.app
        ctx = BotContext(bot_name="helper", session_id="s1", transition="answer")
        out = app.answer.remote(ctx, {app.Question: [app.Question(text="hi")]})
        self.assertEqual(out, {app.Answer: [app.Answer(text="HI")]})
        bodies = [b for b in self.gw.stub_bodies if b["name"] == "helper.answer"]
        self.assertEqual(len(bodies), 1)
        self.assertEqual(bodies[0]["type"], "function")
        self.assertEqual(bodies[0]["extra"]["cpu_millicores"], 500)
        self.assertEqual(bodies[0]["extra"]["image_ref"], "docker.io/library/python:3.11-slim", "the transition's image")

    def test_an_undeclared_output_is_refused(self):
        app = self.app
        with self.assertRaisesRegex(BerthError, "returned Answer markers, which are not among its outputs"):
            app.wrong.remote(BotContext(), {app.Answer: [app.Answer("a"), app.Answer("b")]})
        with self.assertRaisesRegex(BerthError, "returned Answer markers"):
            app.wrong.local(BotContext(), {app.Answer: [app.Answer("a"), app.Answer("b")]})

    def test_inputs_must_match_the_declared_counts(self):
        app = self.app
        with self.assertRaisesRegex(ValueError, "takes 1 Question marker"):
            app.answer.local(BotContext(), {app.Question: []})
        with self.assertRaisesRegex(ValueError, r"takes \[Question\], was given \[Answer\]"):
            app.answer.local(BotContext(), {app.Answer: [app.Answer("x")]})
        self.assertEqual(
            app.answer.local(BotContext(), {app.Question: [app.Question("q")]}), {app.Answer: [app.Answer("Q")]}
        )


if __name__ == "__main__":
    unittest.main()
