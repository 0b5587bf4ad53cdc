"""A whole Bot deployed (``berth deploy app.py:bot``) and its firings in the runner (docs/bots.md).

describe writes the bot's stub (type bot, the definition in extra.bot) and a
function stub per transition; a firing is a JSON task the runner hands to the
transition (markers as JSON documents in and out), whose ``context.prompt``
asks the bot's model over the agent socket (op model.chat).
"""

import base64
import json
import os
import sys
import tempfile
import textwrap
import unittest

from berth import BotContext
from berth.client import describe
from berth.errors import BerthError
from tests.fake_bridge import FakeBridge, start_runner, stop_runner

APP = '''
from dataclasses import dataclass
from berth import Bot, BotLocation

@dataclass
class Question:
    text: str

@dataclass
class Answer:
    text: str
    words: int = 0

bot = Bot(model="tiny-bigram", locations=[BotLocation(marker=Question), BotLocation(marker=Answer, expose=False)])

@bot.transition(inputs={Question: 1}, outputs=[Answer], memory="256Mi")
def answer(context, inputs):
    """Answers with the model's words."""
    q = inputs[Question][0]
    said = context.prompt(q.text, max_tokens=3)
    return {Answer: [Answer(text=q.text.upper() + ": " + said, words=len(said.split()))]}
'''


class DescribeBotTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.addCleanup(lambda: sys.path.remove(self.dir.name) if self.dir.name in sys.path else None)

    def write(self, module, text):
        path = os.path.join(self.dir.name, f"{module}.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        self.addCleanup(sys.modules.pop, module, None)
        return path

    def test_a_bot_deploys_as_one_stub_with_a_function_stub_per_transition(self):
        path = self.write("bot_app_one", APP)
        d = describe.describe(f"{path}:bot", name="helper")
        self.assertEqual((d["type"], d["name"], d["handler"]), ("bot", "helper", "bot_app_one:bot"))
        self.assertTrue(d["config"]["authorized"], "berth's default for bots (docs/bots.md)")
        self.assertEqual(d["config"]["task_policy"]["timeout"], 180)
        bot = d["extra"]["bot"]
        self.assertEqual(bot["model"], "tiny-bigram")
        self.assertEqual(
            bot["locations"], [{"marker": "Question", "expose": True}, {"marker": "Answer", "expose": False}]
        )
        [t] = bot["transitions"]
        self.assertEqual((t["name"], t["inputs"], t["outputs"]), ("answer", {"Question": 1}, ["Answer"]))
        self.assertEqual(t["description"], "Answers with the model's words.")
        stub = t["stub"]
        self.assertEqual((stub["name"], stub["type"]), ("helper.answer", "function"))
        self.assertEqual(stub["config"]["handler"], "bot_app_one:answer")
        self.assertEqual(stub["config"]["runtime"]["memory"], 256, "the transition's own memory")
        json.dumps(d, allow_nan=False)

    def test_a_provider_key_or_no_transition_is_refused_by_name(self):
        path = self.write(
            "bot_app_key",
            """
            from dataclasses import dataclass
            from berth import Bot, BotLocation

            @dataclass
            class Q:
                text: str

            keyed = Bot(api_key="sk-secret", locations=[BotLocation(marker=Q)])

            @keyed.transition(inputs={Q: 1}, outputs=[])
            def noop(context, inputs):
                return {}

            empty = Bot(locations=[BotLocation(marker=Q)])
            """,
        )
        with self.assertRaises(describe.DescribeError) as e:
            describe.describe(f"{path}:keyed")
        self.assertIn("api_key", str(e.exception))
        self.assertNotIn("sk-secret", str(e.exception))
        # describe imports a file once per process (as berth deploy does): the second object from the module.
        with self.assertRaisesRegex(BerthError, "has no transitions"):
            sys.modules["bot_app_key"].empty.deployment("empty", None, "")


class BotContextTest(unittest.TestCase):
    def test_prompting_needs_a_model(self):
        with self.assertRaisesRegex(BerthError, "no model"):
            BotContext().prompt("hi")


class BotFiringTest(unittest.TestCase):
    """The runner (a real subprocess) runs a firing: JSON markers in, the model asked, JSON markers out."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.TemporaryDirectory()
        code = os.path.join(cls.dir.name, "code")
        os.mkdir(code)
        with open(os.path.join(code, "app.py"), "w") as f:
            f.write(textwrap.dedent(APP))
        cls.sock = os.path.join(cls.dir.name, "agent.sock")
        cls.bridge = FakeBridge(cls.sock)
        cls.bridge.state_handler = lambda body: {
            "response": {"choices": [{"message": {"role": "assistant", "content": "of the License"}}]}
        }
        cls.proc = start_runner(code, cls.sock, "app:answer")

    @classmethod
    def tearDownClass(cls):
        stop_runner(cls.proc)
        cls.bridge.close()
        cls.dir.cleanup()

    def fire(self, task_id, payload):
        self.bridge.add(task_id, base64.b64encode(json.dumps(payload).encode()).decode(), payload_format="json")
        return self.bridge.wait_result(task_id)

    def test_a_firing_turns_json_markers_into_the_handlers_markers_and_back(self):
        r = self.fire(
            "t-fire",
            {"session": {"id": "bs-1", "bot": "helper", "model": "tiny-bigram", "firing": 3},
             "inputs": {"Question": [{"text": "why"}]}},
        )
        self.assertEqual(r["status"], "COMPLETE", r)
        self.assertEqual(json.loads(r["result_json"]), {"Answer": [{"text": "WHY: of the License", "words": 3}]})
        [req] = [q for q in self.bridge.state_requests if q.get("op") == "model.chat"][-1:]
        self.assertEqual(req["body"]["model"], "tiny-bigram")
        self.assertEqual(req["body"]["messages"], [{"role": "user", "content": "why"}])
        self.assertEqual((req["body"]["max_tokens"], req["body"]["user"], req["body"]["stream"]), (3, "bs-1", False))

    def test_a_marker_that_does_not_fit_its_type_fails_naming_it(self):
        r = self.fire("t-bad", {"session": {"id": "bs-1", "model": "m"}, "inputs": {"Question": [{"txt": "x"}]}})
        self.assertEqual(r["status"], "FAILED")
        self.assertIn("is not a Question marker", r["error"]["message"])


if __name__ == "__main__":
    unittest.main()
