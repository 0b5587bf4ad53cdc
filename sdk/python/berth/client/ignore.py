"""``.berthignore``: gitignore syntax, matched against paths relative to the synced directory.

Rules follow gitignore(5): blank lines and ``#`` comments are skipped, ``\\``
escapes a leading ``#`` or ``!`` and trailing spaces, ``!`` re-includes, a
trailing ``/`` matches directories only, a ``/`` at the start or in the middle
anchors the pattern to the directory, otherwise it matches a name at any
depth; ``*``, ``?``, ``[...]`` never match ``/``; ``**/``, ``/**/`` and a
trailing ``/**`` span directories. The last matching pattern wins, and the
caller does not descend into an excluded directory, so nothing inside one can
be re-included (as in git).
"""

import re
from dataclasses import dataclass
from typing import Iterable, List, Optional, Pattern

# What code sync leaves out unless a `!` line in .berthignore takes it back:
# version control, dependency trees a container installs itself (through the
# image), caches, and build outputs. Keep in step with cli/deploy/watch.ts and
# the list in docs/tasks.md, "Code sync".
DEFAULT_IGNORES = (
    # version control
    ".git/",
    ".hg/",
    ".svn/",
    # Python bytecode, virtual environments and tool caches
    "__pycache__/",
    "*.pyc",
    "*.pyo",
    ".venv/",
    "venv/",
    ".tox/",
    ".nox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".ruff_cache/",
    ".ipynb_checkpoints/",
    # JavaScript dependencies
    "node_modules/",
    # build outputs
    "dist/",
    "build/",
    "*.egg-info/",
    # editor and OS litter
    ".DS_Store",
)


@dataclass(frozen=True)
class Rule:
    pattern: str
    regex: Pattern[str]
    negate: bool
    dir_only: bool


def _strip_trailing_spaces(line: str) -> str:
    end = len(line)
    while end > 0 and line[end - 1] == " ":
        # An escaped space ("\ ") stays.
        if end >= 2 and line[end - 2] == "\\":
            break
        end -= 1
    return line[:end]


def _class(glob: str, i: int):
    """Translates the bracket expression at glob[i] ('['); returns (regex, next index) or None."""
    j = i + 1
    if j < len(glob) and glob[j] in "!^":
        j += 1
    if j < len(glob) and glob[j] == "]":
        j += 1
    while j < len(glob) and glob[j] != "]":
        j += 1
    if j >= len(glob):
        return None
    body = glob[i + 1 : j]
    negate = body[:1] in ("!", "^")
    if negate:
        body = body[1:]
    out = []
    k = 0
    while k < len(body):
        c = body[k]
        if c == "\\" and k + 1 < len(body):
            out.append(re.escape(body[k + 1]))
            k += 2
            continue
        out.append("-" if c == "-" else re.escape(c))
        k += 1
    inner = "".join(out)
    return (f"(?!/)[^{inner}]" if negate else f"(?!/)[{inner}]"), j + 1


def _translate(glob: str) -> str:
    """Regex for a glob over a whole relative path ('/'-separated)."""
    out = []
    i, n = 0, len(glob)
    while i < n:
        c = glob[i]
        if c == "*":
            if glob.startswith("**", i):
                at_start = i == 0 or glob[i - 1] == "/"
                after = i + 2
                if at_start and after < n and glob[after] == "/":
                    out.append("(?:.*/)?")  # "**/" and "/**/": zero or more directories
                    i = after + 1
                    continue
                if at_start and after == n:
                    out.append(".*")  # trailing "/**": everything inside ("**" alone: everything)
                    i = after
                    continue
                out.append("[^/]*")  # other "**" are plain stars
                i = after
                while i < n and glob[i] == "*":
                    i += 1
                continue
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            cls = _class(glob, i)
            if cls is None:
                out.append(re.escape(c))
                i += 1
            else:
                out.append(cls[0])
                i = cls[1]
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def parse_rule(line: str) -> Optional[Rule]:
    line = line.rstrip("\r\n")
    if not line.strip() or line.startswith("#"):
        return None
    line = _strip_trailing_spaces(line)
    negate = line.startswith("!")
    if negate:
        line = line[1:]
    elif line.startswith("\\!") or line.startswith("\\#"):
        line = line[1:]
    dir_only = line.endswith("/") and not line.endswith("\\/")
    body = line.rstrip("/") if dir_only else line
    if not body:
        return None
    anchored = "/" in body
    body = body.lstrip("/")
    if not body:
        return None
    regex = _translate(body) if anchored else "(?:.*/)?" + _translate(body)
    return Rule(pattern=line, regex=re.compile(f"^{regex}$", re.DOTALL), negate=negate, dir_only=dir_only)


class IgnoreMatcher:
    def __init__(self, lines: Iterable[str] = (), defaults: Iterable[str] = DEFAULT_IGNORES):
        self.rules: List[Rule] = []
        # Defaults first, so that the user's `!venv/` can take one back.
        for line in list(defaults) + list(lines):
            rule = parse_rule(line)
            if rule is not None:
                self.rules.append(rule)

    @classmethod
    def from_file(cls, path: str, defaults: Iterable[str] = DEFAULT_IGNORES) -> "IgnoreMatcher":
        try:
            with open(path, "r", encoding="utf-8") as f:
                return cls(f.read().splitlines(), defaults)
        except FileNotFoundError:
            return cls((), defaults)

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        """Whether the path itself is excluded (its parents are the caller's concern)."""
        result = False
        for rule in self.rules:
            if rule.dir_only and not is_dir:
                continue
            if rule.regex.match(rel_path):
                result = not rule.negate
        return result
