"""A bot's markers as a session carries them: a marker type's name and the JSON of its fields.

Shared by the bot's definition (berth.api.bot: its locations, its transitions'
inputs and outputs, what it registers) and the caller's session
(berth.client.bots). Here, below both, so berth.client never imports berth.api.
"""

import dataclasses
from typing import Any, Dict

from ..errors import BerthError


def marker_name(marker: type) -> str:
    """The name a marker type is known by in a session (its class name)."""
    return marker.__name__


def marker_from_json(marker: type, doc: Any) -> Any:
    """A marker of type ``marker`` from the session's JSON document of its fields."""
    if isinstance(doc, marker):
        return doc
    if not isinstance(doc, dict):
        raise BerthError("invalid_request", f"a {marker_name(marker)} marker must be a JSON object, not {doc!r}")
    validate = getattr(marker, "model_validate", None)  # pydantic models
    try:
        return validate(doc) if callable(validate) else marker(**doc)
    except (TypeError, ValueError) as e:
        raise BerthError("invalid_request", f"{doc!r} is not a {marker_name(marker)} marker: {e}") from None


def marker_to_json(value: Any) -> Dict[str, Any]:
    """The JSON document of a marker's fields (a dataclass, a pydantic model or a plain object)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dict(dump())
    return dict(vars(value))
