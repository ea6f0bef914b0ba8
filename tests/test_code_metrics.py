"""scripts/code_metrics.py measures a small package made here whose figures are known: its
lines and modules, one class's size, ``__all__``, uses of ``Any`` and one import circle
(the imports under ``if TYPE_CHECKING:`` make none)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "code_metrics.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("code_metrics", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


code_metrics = _load()

FILES = {
    "__init__.py": '"""Doc."""\n\nfrom typing import Any\n\nx: Any = 1\n\n__all__ = ["a", "b"]\n__all__ += ["c"]\n',
    "a.py": "from mcpl_host import b\n\n\ndef f() -> None:\n    b.g()\n",
    "b.py": (
        "import typing\n"
        "\n"
        "\n"
        "def g() -> None:\n"
        "    from mcpl_host.a import f  # a circle: a imports b, b imports a\n"
        "\n"
        "    f()\n"
        "\n"
        "\n"
        "def h(value: typing.Any) -> 'Any':\n"
        "    return value\n"
    ),
    "sub/__init__.py": "",
    "sub/c.py": (
        "from typing import TYPE_CHECKING\n"
        "\n"
        "from . import d\n"
        "\n"
        "if TYPE_CHECKING:\n"
        "    from mcpl_host.sub.d import D\n"
        "\n"
        "\n"
        "class Big:\n"
        "    def __init__(self) -> None:\n"
        "        self.one = 1\n"
        "        self.two, self.three = 2, 3\n"
        "        self.one += 1\n"
        "\n"
        "    @property\n"
        "    def shown(self) -> int:\n"
        "        self.four: int = 4\n"
        "        return self.four\n"
        "\n"
        "    def run(self) -> 'D':\n"
        "        return d.D()\n"
        "\n"
        "    async def _hidden(self) -> None:\n"
        "        pass\n"
        "\n"
        "    class Inner:\n"
        "        def __init__(self) -> None:\n"
        "            self.inner = 0\n"
    ),
    "sub/d.py": "class D:\n    pass\n",
}


def _tree(root: Path) -> Path:
    for name, text in FILES.items():
        path = root / "mcpl_host" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_figures_of_a_known_tree(tmp_path: Path) -> None:
    metrics = code_metrics.measure(_tree(tmp_path), top=3, with_duplicates=False)
    expected_lines = sum(1 for text in FILES.values() for line in text.splitlines() if line.strip())
    assert metrics.lines == expected_lines
    assert metrics.modules == 6
    assert metrics.exported == 3
    assert metrics.any == 2  # x: Any, typing.Any; not the import, not the string
    assert metrics.import_circles == [["mcpl_host.a", "mcpl_host.b"]]
    largest = metrics.largest_classes
    assert [c.name for c in largest] == [
        "mcpl_host.sub.c.Big",
        "mcpl_host.sub.c.Big.Inner",
        "mcpl_host.sub.d.D",
    ]
    big = largest[0]
    assert (big.lines, big.attributes, big.public_members) == (20, 4, 2)
    assert (largest[1].lines, largest[1].attributes, largest[1].public_members) == (3, 1, 0)


def test_the_script_prints_json(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(_tree(tmp_path)), "--json", "--no-duplicates"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    figures = json.loads(done.stdout)
    assert figures["modules"] == 6
    assert figures["import_circles"] == [["mcpl_host.a", "mcpl_host.b"]]
    assert figures["largest_classes"][0]["name"] == "mcpl_host.sub.c.Big"
    assert figures["duplicates"] == []
