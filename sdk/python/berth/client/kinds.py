"""What ``berth deploy`` (``describe``) and ``berth image build`` (``image_build``) accept, told apart by kind.

berth.api and berth.sandbox build on this package and it never imports them,
so ``describe`` cannot ask ``isinstance(obj, Function)``. Each class it
accepts names its kind instead, in the class attribute ``_berth_kind``
(KIND_ATTR): berth.api's Function (and so every deployment kind and bot
transition), Bot and Image, and berth.sandbox's Pod.
"""

from typing import Any, Optional

KIND_ATTR = "_berth_kind"
FUNCTION = "function"
POD = "pod"
BOT = "bot"
IMAGE = "image"
# What `berth deploy FILE.py:OBJECT` registers.
DEPLOYABLE = (FUNCTION, POD, BOT)


def kind_of(obj: Any) -> Optional[str]:
    """The kind of an instance of such a class; None for anything else (such a class itself included)."""
    kind = getattr(type(obj), KIND_ATTR, None)
    return kind if isinstance(kind, str) else None
