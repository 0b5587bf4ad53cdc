"""``python3 -m berth.client.image_build FILE.py:OBJECT``: what ``berth image build`` runs.

OBJECT is an ``Image``, or a function, deployment or pod whose image is
built. FILE is imported as ``berth deploy`` imports it (its
``if __name__ == "__main__":`` code does not run). The build streams as
``.remote()`` streams it (berth.client.images): each step as it starts, its
output, its end with a cached/built mark and time; then one line naming the
image. Exit codes: 0 built (or nothing to build), 1 the build failed
(``ImageBuildError: ...`` naming the step), 2 the target is wrong.
"""

import os
import sys
from typing import Any, List, Optional, TextIO

from ..errors import BerthError, ImageBuildError
from .default import default_client
from .describe import DescribeError, _import_file
from .images import build_image
from .kinds import FUNCTION, IMAGE, POD, kind_of

USAGE = "usage: berth image build FILE.py:OBJECT (an Image, or a function, deployment or pod with an image)"


def find_image(target: str) -> "tuple[str, Any]":
    """The Image named by FILE.py:OBJECT (an Image, or the image of a function, deployment or pod)."""
    file_part, sep, attr = target.rpartition(":")
    if not sep or not file_part or not attr:
        raise DescribeError(f"{target!r} is not of the form FILE.py:OBJECT; {USAGE}")
    path = os.path.abspath(file_part)
    if not os.path.isfile(path):
        raise DescribeError(f"no such file: {file_part}")
    obj: Any = _import_file(path)
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise DescribeError(f"{file_part} has no object named {attr}")
        obj = getattr(obj, part)
    if kind_of(obj) == IMAGE:
        return attr, obj
    if kind_of(obj) in (FUNCTION, POD) and kind_of(getattr(obj, "image", None)) == IMAGE:
        return attr, obj.image
    raise DescribeError(f"{attr} in {file_part} is a {type(obj).__name__}, not an Image; {USAGE}")


def main(argv: List[str], out: Optional[TextIO] = None, err: Optional[TextIO] = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    if len(argv) != 1 or argv[0].startswith("-"):
        err.write(f"berth: {USAGE}\n")
        return 2
    try:
        name, image = find_image(argv[0])
        image.check_runnable(name, allow_snapshot=True)
    except DescribeError as e:
        err.write(f"berth: {e}\n")
        if e.traceback:
            err.write(e.traceback)
        return 2
    except ImageBuildError as e:
        err.write(f"berth: ImageBuildError: {e}\n")
        return 1
    if not image.needs_build():
        runs = image.snapshot_id or image.image_ref or "the cluster's default image"
        out.write(f"{name} needs no build: it runs {runs} as it is\n")
        return 0
    try:
        record = build_image(default_client(), image, out=out)
    except ImageBuildError as e:
        err.write(f"berth: ImageBuildError: {e}\n")
        return 1
    except BerthError as e:
        err.write(f"berth: {e.message}\n")
        return 1
    steps = len(record.get("steps") or [])
    out.write(f"image {record.get('image_id')} {record.get('status')} ({steps} step{'s' if steps != 1 else ''})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
