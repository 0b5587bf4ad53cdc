"""``python3 -m berth.client.describe FILE.py:OBJECT [--name NAME] [--archive PATH]``: what ``berth deploy`` registers.

Imports FILE as ``python FILE.py`` would (its directory first on sys.path),
but under its module name, so code under ``if __name__ == "__main__":`` does
not run, and prints ONE JSON line on stdout:

    {"ok": true, "type", "name", "config", "extra", "root", "handler"}

or ``{"ok": false, "error": "..."}`` (plus ``traceback`` for an import error)
with exit code 2. Whatever the module prints while it is imported goes to
stderr. ``--archive PATH`` also writes the code archive of ``root`` (the
deterministic tar.gz that code sync uploads) to PATH, sets
``extra.code_sha256`` to its hash and adds ``archive_files`` (how many files
it holds); without it ``code_sha256`` is empty.
"""

import importlib.util
import json
import os
import sys
import traceback
from typing import Any, Dict, List, Optional, TextIO

from ..errors import BerthError, ImageBuildError
from .default import default_client
from .kinds import BOT, DEPLOYABLE, POD, kind_of

USAGE = "usage: python3 -m berth.client.describe FILE.py:OBJECT [--name NAME] [--archive PATH]"
DECORATORS = "@endpoint, @asgi, @realtime, @task_queue, @schedule or @function, or make it a berth.Pod or berth.Bot"


class DescribeError(Exception):
    """Why the object cannot be described; becomes ``{"ok": false, "error": ...}``."""

    def __init__(self, message: str, tb: str = ""):
        super().__init__(message)
        self.traceback = tb


def parse_args(argv: List[str]) -> Dict[str, Optional[str]]:
    opts: Dict[str, Optional[str]] = {"target": None, "name": None, "archive": None}
    i = 0
    while i < len(argv):
        arg = argv[i]
        key, sep, value = arg.partition("=")
        if key in ("--name", "--archive"):
            if not sep:
                i += 1
                if i >= len(argv):
                    raise DescribeError(f"{key} needs a value; {USAGE}")
                value = argv[i]
            opts[key[2:]] = value
        elif arg.startswith("-"):
            raise DescribeError(f"unknown option {arg}; {USAGE}")
        elif opts["target"] is None:
            opts["target"] = arg
        else:
            raise DescribeError(f"unexpected argument {arg!r}; {USAGE}")
        i += 1
    if not opts["target"]:
        raise DescribeError(USAGE)
    if opts["name"] is not None and not opts["name"].strip():
        raise DescribeError("--name is empty")
    return opts


def _import_file(path: str) -> Any:
    directory, base = os.path.split(path)
    module_name, ext = os.path.splitext(base)
    if ext != ".py":
        raise DescribeError(f"{path} is not a .py file")
    if not module_name.isidentifier():
        raise DescribeError(
            f"{base} cannot be imported by name in the container: rename it to a Python identifier (such as app.py)"
        )
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    if module_name in sys.modules or module_name in sys.builtin_module_names or module_name in stdlib:
        # The container's runner has that module imported already, so it would never load this file.
        raise DescribeError(f"{base} has the name of the module {module_name!r} that Python or berth uses: rename it")
    sys.path.insert(0, directory)
    sys.argv = [path]
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise DescribeError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:
        sys.modules.pop(module_name, None)
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        raise DescribeError(f"cannot import {path}: {type(e).__name__}: {e}", tb) from None
    return module


def _deployables(module: Any) -> List[str]:
    return sorted(k for k, v in vars(module).items() if kind_of(v) in DEPLOYABLE and not k.startswith("_"))


def _find(module: Any, path: str, attr: str) -> Any:
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            found = _deployables(module)
            hint = f"; its deployable objects: {', '.join(found)}" if found else f"; it has none ({DECORATORS})"
            raise DescribeError(f"{path} has no object named {attr}{hint}")
        obj = getattr(obj, part)
    if kind_of(obj) not in DEPLOYABLE:
        if isinstance(obj, type):
            kind = "a class"
        elif callable(obj) and hasattr(obj, "__code__"):
            kind = "a plain function"
        else:
            t = type(obj).__name__
            kind = f"{'an' if t[0] in 'aeiouAEIOU' else 'a'} {t}"
        raise DescribeError(f"{attr} in {path} is {kind}, not deployable: decorate it with {DECORATORS}")
    return obj


def _build(image: Any) -> None:
    """Builds the image before anything is registered (`berth deploy`, as .remote() does); progress on stderr.

    A failed build raises ImageBuildError naming the step, so nothing is deployed.
    """
    from .images import build_image

    built = build_image(default_client(), image, out=sys.stderr)
    image._built_ref, image._built_env = built["ref"], built.get("env", {})


def describe(target: str, name: Optional[str] = None, archive: Optional[str] = None) -> Dict[str, Any]:
    file_part, sep, attr = target.rpartition(":")
    if not sep or not file_part or not attr:
        raise DescribeError(f"{target!r} is not of the form FILE.py:OBJECT; {USAGE}")
    path = os.path.abspath(file_part)
    if not os.path.isfile(path):
        raise DescribeError(f"no such file: {file_part}")
    obj = _find(_import_file(path), file_part, attr)
    kind = kind_of(obj)
    if kind == BOT:
        return _describe_bot(obj, attr, name, archive)
    if kind == POD:
        # An unnamed pod deploys under its variable's name, as a function under its own.
        stub_name = name or obj.name or attr.split(".")[-1]
        if not obj.entrypoint:
            raise DescribeError(f"the pod {attr} in {file_part} has no entrypoint: a deployed pod runs Pod(entrypoint=[...])")
    else:
        stub_name = name or obj.stub_name
    try:
        if kind == POD:
            obj.check_image(stub_name)
        else:
            obj.image.check_runnable(stub_name, allow_snapshot=True)
        if obj.image.needs_build():
            _build(obj.image)
        loc = obj.location()
        sha = ""
        files: Optional[int] = None
        if archive:
            from .sync import pack  # only when asked: packing reads the whole tree

            packed = pack(loc.root)
            with open(archive, "wb") as f:
                f.write(packed.data)
            sha, files = packed.sha256, packed.files
        config, extra = obj.stub_config(loc), obj.stub_extra(sha)
    except BerthError as e:
        raise DescribeError(e.message) from None
    except ImageBuildError as e:
        raise DescribeError(f"ImageBuildError: {e}") from None
    except OSError as e:
        raise DescribeError(str(e)) from None
    return {
        "ok": True,
        "type": obj.stub_type,
        "name": stub_name,
        "config": config,
        "extra": extra,
        "root": loc.root,
        "handler": loc.handler,
        **({"archive_files": files} if files is not None else {}),
    }


def _describe_bot(bot: Any, attr: str, name: Optional[str], archive: Optional[str]) -> Dict[str, Any]:
    """A whole Bot: its own stub (type bot) with the definition in extra.bot, and a stub per transition."""
    try:
        for t in bot.transitions.values():
            t.image.check_runnable(t.stub_name, allow_snapshot=True)
            if t.image.needs_build():
                _build(t.image)
        sha = ""
        files: Optional[int] = None
        if archive and bot.transitions:
            from .sync import pack

            packed = pack(next(iter(bot.transitions.values())).location().root)
            with open(archive, "wb") as f:
                f.write(packed.data)
            sha, files = packed.sha256, packed.files
        d = bot.deployment(attr.split(".")[-1], name, sha)
    except BerthError as e:
        raise DescribeError(e.message) from None
    except ImageBuildError as e:
        raise DescribeError(f"ImageBuildError: {e}") from None
    except OSError as e:
        raise DescribeError(str(e)) from None
    return {
        "ok": True,
        "type": "bot",
        "name": d["name"],
        "config": d["config"],
        "extra": d["extra"],
        "root": d["root"],
        "handler": d["config"]["handler"],
        **({"archive_files": files} if files is not None else {}),
    }


def main(argv: List[str], out: TextIO) -> int:
    try:
        opts = parse_args(argv)
        result = describe(opts["target"] or "", opts["name"], opts["archive"])
        try:
            line = json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as e:
            raise DescribeError(f"the stub's configuration is not JSON ({e}): check volumes and the other options")
        code = 0
    except DescribeError as e:
        body: Dict[str, Any] = {"ok": False, "error": str(e)}
        if e.traceback:
            body["traceback"] = e.traceback
        line, code = json.dumps(body), 2
    out.write(line + "\n")
    out.flush()
    return code


if __name__ == "__main__":
    # stdout is the answer: the user's module printing at import goes to stderr (file descriptor 1 too).
    sys.stdout.flush()
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    sys.exit(main(sys.argv[1:], answer))
