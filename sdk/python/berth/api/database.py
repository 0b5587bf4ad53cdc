"""``berth.Database``: a managed database declared in an app file (docs/stacks.md).

``berth stack deploy app.py`` makes every module-level ``Database`` a member
of the stack beside the file's endpoints and functions: created (PostgreSQL
or Redis as a managed pod, its data on a volume) before them, kept when
unchanged, rolled back with them. Functions reach it by naming its secret::

    db = berth.Database("main", engine="postgres")

    @berth.endpoint(secrets=[db.secret_name])
    def api():
        url = os.environ[db.secret_name]   # postgresql://...

Declaring one does nothing by itself (importing the file in a container has
no effect); ``berth db create`` makes one outside a stack.
"""

import re
from typing import Any, Dict, Optional

ENGINES = ("postgres", "redis")
NAME = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


class Database:
    """A PostgreSQL or Redis database of the workspace, deployed by a stack."""

    def __init__(self, name: str, engine: str = "postgres", cpu: Optional[float] = None, memory: Optional[int] = None):
        if not isinstance(name, str) or not NAME.match(name):
            raise ValueError(
                f"database name {name!r} is not valid: use 1-40 lower-case letters, digits or '-', starting with a letter"
            )
        if engine not in ENGINES:
            raise ValueError(f"database engine {engine!r} is not one berth runs: use postgres or redis")
        for field, value in (("cpu", cpu), ("memory", memory)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise ValueError(f"Database {field} must be a positive number, not {value!r}")
        self.name = name
        self.engine = engine
        self.cpu = cpu
        self.memory = memory

    @property
    def secret_name(self) -> str:
        """The workspace secret holding its connection URL: ``DB_<NAME>_URL``."""
        return f"DB_{self.name.upper().replace('-', '_')}_URL"

    def stack_member(self) -> Dict[str, Any]:
        """The member of ``POST/PUT /api/v1/stack/{ws}`` (kind database)."""
        member: Dict[str, Any] = {"kind": "database", "name": self.name, "engine": self.engine}
        if self.cpu is not None:
            member["cpu"] = self.cpu
        if self.memory is not None:
            member["memory"] = self.memory
        return member

    def __repr__(self) -> str:
        return f"Database({self.name!r}, engine={self.engine!r})"
