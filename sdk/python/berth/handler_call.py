"""How a JSON body becomes a handler call (endpoints, task queues posted to over HTTP).

The convention, shared by the runner (which calls the handler) and the
coordinator (which refuses bad bodies before a container is bothered, from
the ``handler_params`` that ``describe_params`` puts in the stub's extra):

- A parameter named ``context`` receives the :class:`berth.Context`; it is
  never a body key (a ``context`` key is refused unless the handler has no
  ``context`` parameter and takes ``**kwargs``).
- ``callback_url`` in the body sets a per-request callback. It is passed to
  the handler only when the handler has a ``callback_url`` parameter or takes
  ``**kwargs``; otherwise it is removed before binding.
- "One named parameter": a handler with exactly one parameter besides
  ``context`` and no ``**kwargs`` gets the WHOLE body as that argument when
  the body is not empty and has no key of that parameter's name. (An empty
  body binds nothing: the parameter's default applies, or it is missing.)
- Otherwise every body key is a keyword argument: keys that name no
  parameter are unknown (unless the handler takes ``**kwargs``), and
  parameters without a default whose key is absent are missing. Either gives
  one :class:`HandlerArgumentsError` naming all of them.

Positional-only parameters are filled from the body keys of their names too
(passed by position). ``*args`` never receives anything from a body.
"""

import functools
import inspect
from typing import Any, Callable, Dict, List, Optional, Tuple

CONTEXT = "context"
CALLBACK_URL = "callback_url"


class HandlerArgumentsError(TypeError):
    """The body does not fit the handler: ``unknown`` keys, ``missing`` required parameters."""

    def __init__(self, message: str, unknown: Optional[List[str]] = None, missing: Optional[List[str]] = None):
        super().__init__(message)
        self.unknown = list(unknown or [])
        self.missing = list(missing or [])


def unwrap_handler(func: Callable) -> Callable:
    # A decorated berth object (Function and its kinds) holds the user's function.
    inner = getattr(func, "func", None)
    return inner if callable(inner) and getattr(func, "stub_type", None) else func


def _signature_parameters(func: Callable) -> Optional[List[inspect.Parameter]]:
    try:
        return list(inspect.signature(unwrap_handler(func)).parameters.values())
    except (TypeError, ValueError):  # builtins and C callables without a signature
        return None


# An endpoint binds a body on every request: a handler's parameters are worked out once.
_cached_parameters = functools.lru_cache(maxsize=1024)(_signature_parameters)


def _parameters(func: Callable) -> Optional[List[inspect.Parameter]]:
    try:
        return _cached_parameters(func)
    except TypeError:  # an unhashable callable: not cached
        return _signature_parameters(func)


def _is_context(p: inspect.Parameter) -> bool:
    return p.name == CONTEXT and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)


def describe_params(func: Callable) -> Dict[str, Any]:
    """The handler's signature as the coordinator checks bodies against it.

    ``{"names": [...], "required": [...], "var_keyword": bool, "context": bool}``:
    ``names`` are the parameters a body key can fill (in order, ``context``
    excluded), ``required`` those of them without a default. With
    ``K`` = the body's keys minus ``callback_url`` when the handler does not
    accept it, a body is refused when, and only when:
    ``var_keyword`` and ``context`` and "context" in K (unknown: context); or
    not ``var_keyword``, not (len(names) == 1 and K non-empty and names[0]
    not in K), and K - names (unknown) or required - K (missing) is non-empty.
    A callable without an inspectable signature takes anything.
    """
    params = _parameters(func)
    if params is None:
        return {"names": [], "required": [], "var_keyword": True, "context": False}
    named = [p for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and not _is_context(p)]
    return {
        "names": [p.name for p in named],
        "required": [p.name for p in named if p.default is p.empty],
        "var_keyword": any(p.kind == p.VAR_KEYWORD for p in params),
        "context": any(_is_context(p) for p in params),
    }


def _signature_text(func: Callable, params: List[inspect.Parameter]) -> str:
    name = getattr(unwrap_handler(func), "__qualname__", None) or getattr(func, "__name__", "the handler")
    return f"{name}({', '.join(str(p) for p in params)})"


def _quoted(names: List[str]) -> str:
    return ", ".join(repr(n) for n in names)


def bind_endpoint_call(func: Callable, body: Dict[str, Any], context: Any) -> Tuple[tuple, dict]:
    """The ``(args, kwargs)`` that call ``func`` for a JSON ``body`` (see the module's rules)."""
    if not isinstance(body, dict):
        raise HandlerArgumentsError(f"the request body must be a JSON object, got {type(body).__name__}")
    params = _parameters(func)
    if params is None:
        return (), dict(body)
    shape = describe_params(func)
    names, var_keyword, wants_context = shape["names"], shape["var_keyword"], shape["context"]
    body = dict(body)
    if CALLBACK_URL in body and CALLBACK_URL not in names and not var_keyword:
        del body[CALLBACK_URL]

    whole_body = len(names) == 1 and not var_keyword and bool(body) and names[0] not in body
    if whole_body:
        values: Dict[str, Any] = {names[0]: body}
        extra: Dict[str, Any] = {}
    else:
        if var_keyword:
            unknown = [CONTEXT] if wants_context and CONTEXT in body else []
        else:
            unknown = [k for k in body if k not in names]
        missing = [n for n in shape["required"] if n not in body]
        if unknown or missing:
            parts = []
            if unknown:
                parts.append(f"does not accept the key{'s' if len(unknown) > 1 else ''} {_quoted(unknown)}")
            if missing:
                parts.append(f"needs the key{'s' if len(missing) > 1 else ''} {_quoted(missing)}")
            raise HandlerArgumentsError(
                f"{_signature_text(func, params)} {' and '.join(parts)}", unknown=unknown, missing=missing
            )
        values = {k: v for k, v in body.items() if k in names}
        extra = {k: v for k, v in body.items() if k not in names}

    args: List[Any] = []
    kwargs: Dict[str, Any] = {}
    for p in params:
        if _is_context(p):
            value, present = context, True
        else:
            present = p.name in values
            value = values.get(p.name, p.default)
        if p.kind == p.POSITIONAL_ONLY:
            if present or p.default is not p.empty:
                args.append(value)
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and present:
            kwargs[p.name] = value
    kwargs.update(extra)
    return tuple(args), kwargs
