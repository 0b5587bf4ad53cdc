"""The SDK's layout by where code runs (docs/design-notes.md, "Python SDK layout").

Every import in every module is read (those inside functions and under
TYPE_CHECKING too): the in-container runtime never imports the client or the
sandbox side, nothing outside it imports the runtime, and the shared helpers
at the top level import only each other. berth.api and berth.sandbox build on
berth.client, so the client side never imports either of them.
"""

import ast
import os
import tempfile
import unittest

import berth

PACKAGE_DIR = os.path.dirname(os.path.abspath(berth.__file__))
SHARED = {"berth", "berth.env", "berth.errors", "berth.handler_call", "berth.serialize", "berth.unix_http"}
# integrations: ready-made deployments (their API and the container side they serve with), docs/inference.md.
SUBPACKAGES = {"api", "client", "runtime", "sandbox", "integrations"}
# Run by file path with `python3 -I` as a sandbox's pid 1: no berth import at all.
STANDALONE = {
    "berth.runtime.sandbox_init",
    "berth.runtime.sandbox_init_wire",
    "berth.runtime.sandbox_init_start",
    "berth.runtime.warm_handover",
}


def module_files():
    """{module name: path} of every .py file of the package."""
    out = {}
    for root, dirs, files in os.walk(PACKAGE_DIR):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for f in files:
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(root, f), os.path.dirname(PACKAGE_DIR))[: -len(".py")]
            parts = rel.split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = os.path.join(root, f)
    return out


def berth_imports(name: str, source: str, is_package: bool = False, modules=None):
    """The berth modules (or packages) that the source of module `name` imports, anywhere in it."""
    modules = module_files() if modules is None else modules
    package = name.split(".") if is_package else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "berth")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "berth":
                continue
            found.add(target)
            # `from berth.x import y` names a module when berth.x.y is one.
            found.update(f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules)
    return found


def side(module: str) -> str:
    parts = module.split(".")
    if module in SHARED or len(parts) < 2:
        return "shared"
    return parts[1] if parts[1] in SUBPACKAGES else "shared"


def violations(name: str, imports) -> list:
    """Why the imports of module `name` break the layout rule (empty when they do not)."""
    mine = side(name)
    bad = []
    for target in sorted(imports):
        theirs = side(target)
        if name in STANDALONE:
            bad.append(f"{name} runs standalone as a script but imports {target}")
        elif mine == "runtime" and theirs in ("client", "sandbox"):
            bad.append(f"{name} (in-container runtime) imports {target} ({theirs} side)")
        elif mine != "runtime" and theirs == "runtime":
            bad.append(f"{name} ({mine}) imports {target} (in-container runtime)")
        elif name in SHARED and name != "berth" and target not in SHARED and theirs != "shared":
            bad.append(f"{name} (a shared helper) imports {target} ({theirs})")
    return bad


# berth.client is the lower layer: berth.api (and berth.sandbox) import it, it imports neither,
# so there is no cycle to dodge with an import inside a function.
BELOW = "client"
ABOVE_CLIENT = ("api", "sandbox")


def client_violations(name: str, imports) -> list:
    """The imports by which a module of berth.client reaches up into berth.api or berth.sandbox."""
    if side(name) != BELOW:
        return []
    return [
        f"{name} ({BELOW} side, below api and sandbox) imports {target} ({side(target)})"
        for target in sorted(imports)
        if side(target) in ABOVE_CLIENT
    ]


def scan(files, rule) -> list:
    """What `rule` finds in the imports of each file of {module name: path}."""
    problems = []
    for name, path in sorted(files.items()):
        with open(path, encoding="utf-8") as f:
            problems += rule(name, berth_imports(name, f.read(), path.endswith("__init__.py")))
    return problems


class LayoutTest(unittest.TestCase):
    def test_no_import_crosses_between_client_and_runtime(self):
        files = module_files()
        self.assertIn("berth.runtime.runner", files)
        self.assertIn("berth.client.client", files)
        problems = []
        for name, path in sorted(files.items()):
            with open(path, encoding="utf-8") as f:
                problems += violations(name, berth_imports(name, f.read(), path.endswith("__init__.py")))
        self.assertEqual(problems, [])

    def test_the_client_never_imports_api_or_sandbox(self):
        files = module_files()
        client = {n: p for n, p in files.items() if side(n) == BELOW}
        # Not vacuous: the package itself, the modules api builds on and the ones that inspect api's objects.
        for name in ("berth.client", "berth.client.client", "berth.client.bots", "berth.client.describe", "berth.client.image_build"):
            self.assertIn(name, client)
        self.assertEqual(scan(client, client_violations), [])

    def test_the_client_check_catches_an_upward_import(self):
        files = module_files()
        src = (
            "from typing import TYPE_CHECKING\n"
            "import berth.api.function\n"
            "from .. import api\n"
            "if TYPE_CHECKING:\n"
            "    from berth.sandbox.pod import Pod\n"
            "def f():\n"
            "    from ..api.bot import marker_name\n"
            "    from berth import sandbox\n"
            "    from .config import current_credentials\n"
            "    from ..errors import BerthError\n"
        )
        self.assertEqual(
            client_violations("berth.client.x", berth_imports("berth.client.x", src, modules=files)),
            [
                "berth.client.x (client side, below api and sandbox) imports berth.api (api)",
                "berth.client.x (client side, below api and sandbox) imports berth.api.bot (api)",
                "berth.client.x (client side, below api and sandbox) imports berth.api.function (api)",
                "berth.client.x (client side, below api and sandbox) imports berth.sandbox (sandbox)",
                "berth.client.x (client side, below api and sandbox) imports berth.sandbox.pod (sandbox)",
            ],
        )
        # In the package's __init__, `.` is the package itself, so `..api` is berth.api.
        self.assertEqual(
            client_violations("berth.client", berth_imports("berth.client", "from ..api import image\n", True, files)),
            [
                "berth.client (client side, below api and sandbox) imports berth.api (api)",
                "berth.client (client side, below api and sandbox) imports berth.api.image (api)",
            ],
        )
        # Upward is fine from above: api, sandbox and the runtime's own rule are not this one's business.
        self.assertEqual(client_violations("berth.api.x", {"berth.client.client", "berth.api.image"}), [])
        # A planted file, read from disk as the real scan reads the package.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "planted.py")
            with open(path, "w", encoding="utf-8") as f:
                f.write("def g():\n    from ..api.function import Function\n    return Function\n")
            self.assertEqual(
                scan({"berth.client.planted": path}, client_violations),
                ["berth.client.planted (client side, below api and sandbox) imports berth.api.function (api)"],
            )

    def test_every_module_has_a_home(self):
        files = module_files()
        homeless = [n for n in files if n not in SHARED and n.split(".")[1] not in SUBPACKAGES]
        self.assertEqual(homeless, [], "a new top-level module is a shared helper only when added to SHARED here")

    def test_the_check_catches_a_crossing(self):
        src = "def f():\n    from ..client.client import Client\n"
        self.assertEqual(
            violations("berth.runtime.x", berth_imports("berth.runtime.x", src)),
            ["berth.runtime.x (in-container runtime) imports berth.client.client (client side)"],
        )
        src = "from berth.runtime import runner\n"
        self.assertEqual(
            violations("berth.sandbox.x", berth_imports("berth.sandbox.x", src)),
            [
                "berth.sandbox.x (sandbox) imports berth.runtime (in-container runtime)",
                "berth.sandbox.x (sandbox) imports berth.runtime.runner (in-container runtime)",
            ],
        )
        self.assertEqual(
            violations("berth.errors", berth_imports("berth.errors", "from .api.options import TaskPolicy\n")),
            ["berth.errors (a shared helper) imports berth.api.options (api)"],
        )
        self.assertTrue(violations("berth.runtime.sandbox_init", {"berth.errors"}))
        self.assertEqual(violations("berth.runtime.runner", berth_imports("berth.runtime.runner", "from .. import serialize\n")), [])

    def test_the_public_surface_resolves(self):
        for name in berth.__all__:
            self.assertIsNotNone(getattr(berth, name), name)


if __name__ == "__main__":
    unittest.main()
