"""Context: what a handler that takes a ``context`` parameter is given."""

from dataclasses import dataclass
from typing import Any, Optional


@dataclass
class Context:
    container_id: Optional[str] = None
    stub_id: Optional[str] = None
    stub_type: Optional[str] = None
    callback_url: Optional[str] = None
    task_id: Optional[str] = None
    timeout: Optional[int] = None
    on_start_value: Optional[Any] = None
    bind_port: int = 0
    python_version: str = ""
