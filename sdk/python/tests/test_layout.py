"""The SDK's layout by where code runs (docs/design-notes.md, "Python SDK layout (issue 12)").

Every import in every module is read (those inside functions and under
TYPE_CHECKING too): the in-container runtime never imports the client or the
sandbox side, nothing outside it imports the runtime, and the shared helpers
at the top level import only each other.
"""

import ast
import os
import unittest

import berth

PACKAGE_DIR = os.path.dirname(os.path.abspath(berth.__file__))
SHARED = {"berth", "berth.env", "berth.errors", "berth.handler_call", "berth.serialize", "berth.unix_http"}
# integrations: ready-made deployments (their API and the container side they serve with), docs/inference.md.
SUBPACKAGES = {"api", "client", "runtime", "sandbox", "integrations"}
# Run by file path with `python3 -I` as a sandbox's pid 1: no berth import at all.
STANDALONE = {"berth.runtime.sandbox_init", "berth.runtime.sandbox_init_wire"}


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
