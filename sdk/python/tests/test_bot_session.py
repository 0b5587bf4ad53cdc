"""The client side of a bot session (berth.BotSession) against a stand-in for the REST routes.

The stand-in keeps the session as the coordinator's routes answer it
(coordinator/http/routes/bots.ts) and "fires" the transition on each push
(a Question becomes an Answer), so the client's requests, paths, bodies and
its reading of the answers are what is checked.
"""

import json
import os
import re
import threading
import unittest
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from unittest import mock

from berth import Bot, BotLocation, BotSession
from berth.client.client import Client
from berth.errors import BerthError


@dataclass
class Question:
    text: str


@dataclass
class Answer:
    text: str


class SessionRoutes:
    def __init__(self):
        self.sessions = {}
        self.requests = []
        routes = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self, status, body):
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def do_GET(self):
                routes.requests.append(("GET", self.path, None, self.headers.get("Authorization")))
                if self.path == "/api/v1/workspace/current":
                    return self.answer(200, {"external_id": "ws-a", "name": "a", "created_at": "x"})
                m = re.match(r"^/api/v1/bot/ws-a/sessions/([^/]+)$", self.path)
                if m and m.group(1) in routes.sessions:
                    s = routes.sessions[m.group(1)]
                    return self.answer(200, {"session": s, "history": [{"seq": 1, "kind": "created", "body": {}, "at": "t"}]})
                return self.answer(404, {"error": {"code": "not_found", "message": f"no {self.path}"}})

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n) or b"null")
                routes.requests.append(("POST", self.path, body, self.headers.get("Authorization")))
                m = re.match(r"^/api/v1/bot/ws-a/([^/]+)/sessions$", self.path)
                if m and m.group(1) == "helper":
                    sid = f"bs-{len(routes.sessions) + 1}"
                    routes.sessions[sid] = {"id": sid, "bot": "helper", "version": 1, "in_flight": [],
                                            "locations": {"Question": [], "Answer": []}}
                    return self.answer(201, {"session": routes.sessions[sid]})
                m = re.match(r"^/api/v1/bot/ws-a/sessions/([^/]+)/markers$", self.path)
                if m and m.group(1) in routes.sessions:
                    s = routes.sessions[m.group(1)]
                    if body["location"] not in s["locations"]:
                        return self.answer(400, {"error": {"code": "invalid_request", "message": "no location"}})
                    if body["location"] == "Question":
                        s["locations"]["Answer"] += [{"text": q["text"].upper()} for q in body["markers"]]
                    else:
                        s["locations"][body["location"]] += body["markers"]
                    s["version"] += 1
                    return self.answer(200, {"session": s})
                return self.answer(404, {"error": {"code": "not_found", "message": f"no {self.path}"}})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class BotSessionTest(unittest.TestCase):
    def setUp(self):
        self.routes = SessionRoutes()
        self.addCleanup(self.routes.close)
        env = mock.patch.dict(os.environ, {"BERTH_URL": self.routes.url, "SERVICE_TOKEN": "bt_test", "BERTH_CONFIG": "/nonexistent"})
        env.start()
        self.addCleanup(env.stop)
        self.client = Client("bt_test", self.routes.url)

    def test_open_push_and_read_markers_back_as_instances(self):
        s = BotSession.open("helper", self.client)
        self.assertEqual(s.id, "bs-1")
        s.push(Question("hi"), Question("there"))
        self.assertEqual(s.wait_for(Answer, 2, timeout=5), [Answer("HI"), Answer("THERE")])
        posts = [r for r in self.routes.requests if r[0] == "POST" and r[1].endswith("/markers")]
        self.assertEqual(len(posts), 1, "one request per marker type")
        self.assertEqual(posts[0][2], {"location": "Question", "markers": [{"text": "hi"}, {"text": "there"}]})
        self.assertTrue(all(r[3] == "Bearer bt_test" for r in self.routes.requests))
        self.assertEqual(s.history()[0]["kind"], "created")

    def test_resume_reads_the_session_again(self):
        first = BotSession.open("helper", self.client)
        first.push(Question("a"))
        again = BotSession.resume(first.id, self.client)
        self.assertEqual(again.markers(Answer), [Answer("A")])
        self.assertEqual(again.state()["version"], 2)

    def test_errors_name_the_cause(self):
        with self.assertRaises(BerthError) as e:
            BotSession.open("nobot", self.client)
        self.assertEqual(e.exception.code, "not_found")
        with self.assertRaises(BerthError):
            BotSession.resume("bs-404", self.client)
        s = BotSession.open("helper", self.client)
        with self.assertRaisesRegex(TypeError, "marker instances"):
            s.push(Question)
        with self.assertRaisesRegex(BerthError, "waited for 1"):
            s.wait_for(Answer, 1, timeout=0.05, interval=0.01)

    def test_a_named_bot_opens_its_session(self):
        bot = Bot(name="helper", locations=[BotLocation(marker=Question), BotLocation(marker=Answer)])
        s = bot.session(self.client)
        self.assertEqual(s.state()["bot"], "helper")
        with self.assertRaisesRegex(BerthError, "unnamed Bot"):
            Bot(locations=[BotLocation(marker=Question)]).session(self.client)


if __name__ == "__main__":
    unittest.main()
