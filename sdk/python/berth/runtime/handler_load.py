"""Finding the user's handler in a container and describing what went wrong.

Shared by the queued runner (``berth.runtime.runner``) and the HTTP runner of
deployed endpoints (``berth.runtime.http_runner``): both import ``BERTH_HANDLER``
(``module:function``) and ``BERTH_ON_START`` the same way, and report an
exception as ``{"type", "message", "traceback"}`` (a TaskError).
"""

import importlib
import inspect
import os
import traceback
from typing import Any, Callable

from .. import env
from .bridge import log

# The berth package (its subpackages included): frames of files under it are berth's own.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def qualified_name(cls: type) -> str:
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def resolve(spec: str, what: str) -> Callable:
    """Imports ``module:function`` (a ``@function`` object gives its function)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{what} {spec!r} is not of the form module:function")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    from ..api.function import Function

    if isinstance(obj, Function):
        obj = obj.func
    if not callable(obj):
        raise TypeError(f"{spec} is a {type(obj).__name__}, not a function")
    return obj


def import_handler(spec: str) -> Callable:
    """``resolve`` of BERTH_HANDLER, with calls made at import time refused (env.importing_user_code)."""
    env.set_importing(True)
    try:
        return resolve(spec, "BERTH_HANDLER")
    finally:
        env.set_importing(False)


def takes_context(fn: Callable) -> bool:
    try:
        p = inspect.signature(fn).parameters.get("context")
    except (TypeError, ValueError):
        return False
    return p is not None and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)


def context_comes_first(fn: Callable) -> bool:
    """Whether ``context`` is the first positional parameter (beta9's ``handler(context, data)``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return bool(positional) and positional[0].name == "context"


def _is_berth_file(filename: str) -> bool:
    return os.path.abspath(filename).startswith(_PACKAGE_DIR + os.sep)


def trimmed_traceback(e: BaseException) -> str:
    """The exception as Python prints it, without berth's own frames at the top (the user's start below them)."""
    tb = e.__traceback__
    while tb is not None and _is_berth_file(tb.tb_frame.f_code.co_filename):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def error_of(e: BaseException) -> dict:
    return {"type": qualified_name(type(e)), "message": str(e), "traceback": trimmed_traceback(e)}


def load_failure(what: str, e: BaseException, consequence: str) -> dict:
    """Logs a failed import or on_start once; the error every later task or request reports."""
    tb = trimmed_traceback(e)
    log(f"{what}: {type(e).__name__}: {e}; {consequence}\n{tb}")
    return {"type": qualified_name(type(e)), "message": f"{what}: {type(e).__name__}: {e}", "traceback": tb}
