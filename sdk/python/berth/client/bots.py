"""The client side of a deployed bot's session (docs/bots.md, "Sessions"), over the REST routes.

``bot.session()`` (or ``BotSession.open("helper")``) opens a session of the
deployed bot of that name in the token's workspace; ``push`` puts markers
into their locations (each marker's class name is its location) and fires
what they enable; ``markers(Answer)`` reads a location back as instances;
``wait_for(Answer, 1)`` polls until a location holds that many markers.
``BotSession.resume(session_id)`` picks a session up again, after a
coordinator restart too. The websocket (``/bot/{name}/session``) carries
the same session for clients that want its events pushed.
"""

import time
from typing import Any, Dict, List, Optional, Type, TypeVar
from urllib.parse import quote

from ..errors import BerthError
from .default import default_client
from .markers import marker_from_json, marker_name, marker_to_json

M = TypeVar("M")


class BotSession:
    def __init__(self, client: Any, workspace: str, session: Dict[str, Any]):
        self.client = client
        self.workspace = workspace
        self._session = session

    @property
    def id(self) -> str:
        return str(self._session["id"])

    def __repr__(self) -> str:
        return f"<berth.BotSession {self.id} of {self._session.get('bot')}>"

    @classmethod
    def open(cls, bot_name: str, client: Any = None) -> "BotSession":
        """A new session of the deployed bot ``bot_name`` (its latest active version)."""
        if not isinstance(bot_name, str) or not bot_name:
            raise ValueError("BotSession.open needs the bot deployment's name")
        client, ws = _client_and_workspace(client)
        r = client.request("POST", f"/api/v1/bot/{quote(ws, safe='')}/{quote(bot_name, safe='')}/sessions")
        return cls(client, ws, r["session"])

    @classmethod
    def resume(cls, session_id: str, client: Any = None) -> "BotSession":
        """An existing session of the token's workspace, as the coordinator has it."""
        client, ws = _client_and_workspace(client)
        s = cls(client, ws, {"id": session_id})
        s.refresh()
        return s

    def _path(self, suffix: str = "") -> str:
        return f"/api/v1/bot/{quote(self.workspace, safe='')}/sessions/{quote(self.id, safe='')}{suffix}"

    def refresh(self) -> Dict[str, Any]:
        """Reads the session again; answers it with its history (``{"session", "history"}``)."""
        r = self.client.request("GET", self._path())
        self._session = r["session"]
        return r

    def push(self, *markers: Any) -> Dict[str, Any]:
        """Puts the markers into their locations (one request per marker type, in order)."""
        if not markers:
            raise ValueError("push needs at least one marker")
        groups: Dict[str, List[Dict[str, Any]]] = {}
        for m in markers:
            if isinstance(m, type):
                raise TypeError(f"push takes marker instances, not the class {m.__name__}")
            groups.setdefault(marker_name(type(m)), []).append(marker_to_json(m))
        for location, docs in groups.items():
            r = self.client.request("POST", self._path("/markers"), {"location": location, "markers": docs})
            self._session = r["session"]
        return self._session

    def state(self) -> Dict[str, Any]:
        """The session as last read: ``locations`` (type name -> JSON markers), ``in_flight``, ``version``."""
        return self._session

    def history(self) -> List[Dict[str, Any]]:
        return list(self.refresh()["history"])

    def markers(self, marker: Type[M]) -> List[M]:
        """The markers now in ``marker``'s location, as instances, oldest first."""
        self.refresh()
        docs = (self._session.get("locations") or {}).get(marker_name(marker))
        if docs is None:
            raise BerthError("invalid_request", f"the session has no location {marker_name(marker)}")
        return [marker_from_json(marker, d) for d in docs]

    def wait_for(self, marker: Type[M], count: int = 1, timeout: float = 300.0, interval: float = 0.5) -> List[M]:
        """Polls until ``marker``'s location holds at least ``count`` markers; raises on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.markers(marker)
            if len(got) >= count:
                return got
            if time.monotonic() > deadline:
                raise BerthError(
                    "deadline_exceeded",
                    f"session {self.id}: {len(got)} {marker.__name__} marker(s) after {timeout} s, waited for {count}",
                )
            time.sleep(interval)


def _client_and_workspace(client: Any) -> "tuple[Any, str]":
    if client is None:
        client = default_client()
    return client, str(client.current_workspace()["external_id"])
