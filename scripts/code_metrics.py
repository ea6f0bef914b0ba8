#!/usr/bin/env python3
"""The size and shape of the mcpl_host package, measured the same way at any revision.

    .venv/bin/python scripts/code_metrics.py [--root PATH] [--top N] [--json]

``--root`` is a checkout of this repository (default: the one this script sits in); an older
revision is measured from a detached worktree, e.g.
``git worktree add --detach /tmp/old 1947f1b`` then ``--root /tmp/old``. Everything but the
duplicate pairs is read from the source with :mod:`ast` (nothing is imported or run):

- ``lines``: non-blank lines of the ``.py`` files under ``mcpl_host``; ``modules``: their count.
- ``largest_classes``: the ``--top`` classes (nested ones too) with the most lines, from the
  ``class`` statement to its last line; for each, ``attributes``, the distinct names ``x``
  assigned as ``self.x = ...`` (also annotated and augmented assignments) in the class's own
  methods, and ``public_members``, the distinct names of methods and properties defined in
  the class body that do not start with ``_``.
- ``exported``: the names in ``mcpl_host.__all__`` (the literal list or tuple assigned to it,
  plus any literal ``__all__ += [...]``).
- ``any``: how often the name ``Any`` is used in code, as a name (``Any``) or an attribute
  (``typing.Any``); not in strings or comments, and not the ``import`` line itself.
- ``import_circles``: the strongly connected components of more than one module of the graph
  "module A imports module B", over the modules of ``mcpl_host``. An edge is every
  ``import`` / ``from ... import`` at module level or inside a function or class, except those
  inside ``if TYPE_CHECKING:`` blocks (they never run). ``from P import n`` is an edge to
  ``P.n`` when that is a module, else to ``P``; the parent packages Python initialises on the
  way are not edges (every module would otherwise sit in a circle with ``mcpl_host``).

Duplicate pairs (places that share six or more lines, the same or of the same shape) are
counted by the machine's ``duplicates`` command, when it is on the PATH, separately for the
package and for the tests, from the first line of its report::

    duplicates --repo ROOT/mcpl_host --most 1 --seconds 120
    duplicates --repo ROOT/tests --most 1 --seconds 120

(``--most`` limits only the rows listed, not the count; the first line reads ``N pairs of
places (M files read), ...`` or ``no duplicates ...``. ``--most 200`` lists every pair.)
Without the command the figures read "not available". The exit status is 0.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "mcpl_host"


@dataclass(frozen=True)
class ClassSize:
    """One class: ``name`` is ``module.Qualified.Name``; ``lines`` counts every line, blank too."""

    name: str
    lines: int
    attributes: int
    public_members: int


@dataclass(frozen=True)
class DuplicatePairs:
    """The ``duplicates`` count for one folder; ``pairs`` is None when it could not be had."""

    folder: str
    pairs: int | None
    command: str
    note: str = ""


@dataclass
class Metrics:
    """Every figure of one checkout; see the module docstring for what each one counts."""

    root: str
    lines: int = 0
    modules: int = 0
    largest_classes: list[ClassSize] = field(default_factory=list[ClassSize])
    exported: int = 0
    any: int = 0
    import_circles: list[list[str]] = field(default_factory=list[list[str]])
    duplicates: list[DuplicatePairs] = field(default_factory=list[DuplicatePairs])


def module_name(package_dir: Path, path: Path) -> str:
    """``mcpl_host/a/b.py`` -> ``mcpl_host.a.b``; ``mcpl_host/a/__init__.py`` -> ``mcpl_host.a``."""
    parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def parse_package(package_dir: Path) -> dict[str, tuple[Path, ast.Module]]:
    """Every module under ``package_dir``, by dotted name, parsed (raises SyntaxError)."""
    modules: dict[str, tuple[Path, ast.Module]] = {}
    for path in sorted(package_dir.rglob("*.py")):
        modules[module_name(package_dir, path)] = (path, ast.parse(path.read_text("utf-8"), str(path)))
    return modules


def count_lines(paths: Sequence[Path]) -> int:
    """Non-blank lines in ``paths``."""
    return sum(1 for path in paths for line in path.read_text("utf-8").splitlines() if line.strip())


def _own_nodes(body: Sequence[ast.stmt]) -> Iterator[ast.AST]:
    """Every node under ``body``, not descending into nested classes."""
    stack: list[ast.AST] = [node for node in body if not isinstance(node, ast.ClassDef)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.ClassDef))


def _self_targets(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        yield target.attr
    elif isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _self_targets(element)
    elif isinstance(target, ast.Starred):
        yield from _self_targets(target.value)


def class_size(module: str, qualname: str, node: ast.ClassDef) -> ClassSize:
    """The figures of one class (see :class:`ClassSize`)."""
    attributes: set[str] = set()
    for inner in _own_nodes(node.body):
        if isinstance(inner, ast.Assign):
            for target in inner.targets:
                attributes.update(_self_targets(target))
        elif isinstance(inner, (ast.AnnAssign, ast.AugAssign)):
            attributes.update(_self_targets(inner.target))
    public = {
        member.name
        for member in node.body
        if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and not member.name.startswith("_")
    }
    end = node.end_lineno if node.end_lineno is not None else node.lineno
    return ClassSize(f"{module}.{qualname}", end - node.lineno + 1, len(attributes), len(public))


def classes(module: str, tree: ast.AST, prefix: str = "") -> Iterator[ClassSize]:
    """Every class in ``tree``, nested ones with their qualified name."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            qualname = f"{prefix}{node.name}"
            yield class_size(module, qualname, node)
            yield from classes(module, node, f"{qualname}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from classes(module, node, f"{prefix}{node.name}.<locals>.")
        else:
            yield from classes(module, node, prefix)


def _literal_names(value: ast.expr | None) -> list[str]:
    if isinstance(value, (ast.List, ast.Tuple)):
        return [e.value for e in value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def exported_names(init: ast.Module) -> list[str]:
    """The literal ``__all__`` of a package's ``__init__`` (empty when there is none)."""
    names: list[str] = []
    for node in init.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            names = _literal_names(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id == "__all__":
                names = _literal_names(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            if node.target.id == "__all__":
                names += _literal_names(node.value)
    return names


def count_any(tree: ast.AST) -> int:
    """Uses of ``Any`` as a name or an attribute in ``tree``."""
    return sum(
        1
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "Any")
        or (isinstance(node, ast.Attribute) and node.attr == "Any")
    )


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """The import statements under ``node``, skipping the body of ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        elif isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.orelse:
                yield from _imports_in(stmt)
        else:
            yield from _imports(child)


def _imports_in(stmt: ast.stmt) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        yield stmt
    else:
        yield from _imports(stmt)


def imported_modules(name: str, is_package: bool, tree: ast.Module, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` imports (see the module docstring)."""
    found: set[str] = set()
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in known)
            continue
        base = node.module or ""
        if node.level:
            anchor = name.split(".") if is_package else name.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        for alias in node.names:
            child = f"{base}.{alias.name}"
            if child in known:
                found.add(child)
            elif base in known:
                found.add(base)
    found.discard(name)
    return found


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, without recursion: the components, each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph.get(succ, ())))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return sorted(components)


def import_circles(modules: dict[str, tuple[Path, ast.Module]]) -> list[list[str]]:
    """The import circles (components of more than one module) among ``modules``."""
    known = set(modules)
    graph = {
        name: imported_modules(name, path.name == "__init__.py", tree, known)
        for name, (path, tree) in modules.items()
    }
    return [component for component in strongly_connected(graph) if len(component) > 1]


_PAIRS = re.compile(r"^(\d+) pairs? of places")


def duplicate_pairs(root: Path, folder: str, seconds: int) -> DuplicatePairs:
    """Run ``duplicates`` on ``root/folder`` and read the pair count from its first line."""
    command = ["duplicates", "--repo", str(root / folder), "--most", "1", "--seconds", str(seconds)]
    shown = " ".join(command)
    if shutil.which("duplicates") is None:
        return DuplicatePairs(folder, None, shown, "not available")
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    lines = result.stdout.splitlines()
    first = lines[0] if lines else ""
    incomplete = "; ".join(line for line in lines if line.startswith("incomplete:"))
    if first.startswith("no duplicates"):
        return DuplicatePairs(folder, 0, shown, incomplete)
    match = _PAIRS.match(first)
    if match is None:
        return DuplicatePairs(folder, None, shown, first or result.stderr.strip() or "no output")
    return DuplicatePairs(folder, int(match.group(1)), shown, incomplete)


def measure(root: Path, top: int = 10, with_duplicates: bool = True, seconds: int = 120) -> Metrics:
    """Every figure for the checkout at ``root`` (raises FileNotFoundError without a package)."""
    package_dir = root / PACKAGE
    if not (package_dir / "__init__.py").is_file():
        raise FileNotFoundError(f"no {PACKAGE} package under {root}")
    modules = parse_package(package_dir)
    metrics = Metrics(root=str(root))
    metrics.lines = count_lines([path for path, _ in modules.values()])
    metrics.modules = len(modules)
    sizes = [size for name, (_, tree) in modules.items() for size in classes(name, tree)]
    sizes.sort(key=lambda size: (-size.lines, size.name))
    metrics.largest_classes = sizes[:top]
    metrics.exported = len(exported_names(modules[PACKAGE][1]))
    metrics.any = sum(count_any(tree) for _, tree in modules.values())
    metrics.import_circles = import_circles(modules)
    if with_duplicates:
        metrics.duplicates = [duplicate_pairs(root, folder, seconds) for folder in (PACKAGE, "tests")]
    return metrics


def render(metrics: Metrics) -> str:
    """The figures as plain text, one per line."""
    out = [
        f"root: {metrics.root}",
        f"lines of code ({PACKAGE}, non-blank): {metrics.lines}",
        f"modules: {metrics.modules}",
        f"largest classes ({len(metrics.largest_classes)}): lines, attributes, public members",
    ]
    out += [f"  {c.lines:5} {c.attributes:4} {c.public_members:4}  {c.name}" for c in metrics.largest_classes]
    out.append(f"exported names ({PACKAGE}.__all__): {metrics.exported}")
    out.append(f"Any (names and attributes): {metrics.any}")
    out.append(f"import circles: {len(metrics.import_circles)}")
    out += [f"  {' <-> '.join(component)}" for component in metrics.import_circles]
    for dup in metrics.duplicates:
        figure = "not available" if dup.pairs is None else str(dup.pairs)
        note = f" ({dup.note})" if dup.note and dup.pairs is not None else ""
        detail = f": {dup.note}" if dup.pairs is None and dup.note != "not available" else ""
        out.append(f"duplicate pairs ({dup.folder}): {figure}{note}{detail}")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, default=ROOT, help="a checkout of this repository")
    parser.add_argument("--top", type=int, default=10, help="how many of the largest classes")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-duplicates", action="store_true", help="skip the duplicates command")
    parser.add_argument("--seconds", type=int, default=120, help="the duplicates command's time limit")
    args = parser.parse_args(argv)
    metrics = measure(args.root.resolve(), args.top, not args.no_duplicates, args.seconds)
    print(json.dumps(asdict(metrics), indent=2) if args.json else render(metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
