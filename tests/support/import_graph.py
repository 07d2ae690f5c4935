"""The package's import graph, read with ``ast`` (nothing is imported): every arrow, and the figures of issue 29.

An arrow is one import from a module of kinetis_queue, at module level or inside a function (a lazy import is
still an arrow), under ``if TYPE_CHECKING:`` or not, or an ``importlib.import_module("a.literal")``.
tests/core/test_layout.py checks the arrows against the architecture's map; ``python -m
tests.support.import_graph [ROOT]`` prints the figures of the checkout at ROOT (this one by default):

- modules: every module and package of kinetis_queue but the migrations; how many sit at its top;
- floors: a module's floor is one more than the highest floor it imports at run time at module level (a leaf
  is on floor 1); the layers are the highest floor. A circle counts as one module, its members on one floor;
- upward imports: run-time arrows (at module level or in a function) to a module on a higher floor;
- circles: groups of modules that import each other at run time, in functions too; those at import time
  are circles of module-level arrows alone;
- in-function imports: arrows to the package's own modules made inside a function.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Arrow:
    """One import: from module ``source`` to module ``target``; ``type_only`` under TYPE_CHECKING, ``in_function``
    made when a function runs."""

    source: str
    target: str
    type_only: bool
    in_function: bool = False

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}{' (type only)' if self.type_only else ''}"


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at ``path`` under the directory ``root`` that holds the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(node: ast.Import | ast.ImportFrom, source: str, is_package: bool, root: Path) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    base = node.module or ""
    if node.level:  # a relative import, resolved against the importing module's package
        package = source.split(".") if is_package else source.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, base] if base else package)
    for alias in node.names:
        # `from kinetis_queue import conf` imports the module kinetis_queue.conf.
        submodule = root.joinpath(*f"{base}.{alias.name}".split("."))
        yield f"{base}.{alias.name}" if submodule.with_suffix(".py").exists() or submodule.is_dir() else base


def _is_import_module(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    )


def arrows(path: Path, root: Path) -> list[Arrow]:
    """Every import in the module at ``path``."""
    source = module_name(path, root)
    found: list[Arrow] = []

    def visit(node: ast.AST, type_only: bool, in_function: bool) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True, in_function)
            for child in node.orelse:
                visit(child, type_only, in_function)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            is_package = path.name == "__init__.py"
            found.extend(Arrow(source, t, type_only, in_function) for t in _targets(node, source, is_package, root))
        if _is_import_module(node):  # importlib.import_module("a.literal.name")
            found.append(Arrow(source, node.args[0].value, type_only, in_function))  # type: ignore[attr-defined]
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, type_only, inner)

    visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False, False)
    return found


def modules(package: Path) -> list[Path]:
    """The package's modules, the migrations left out."""
    return [path for path in sorted(package.rglob("*.py")) if "migrations" not in path.relative_to(package).parts]


def all_arrows(package: Path) -> list[Arrow]:
    return [arrow for path in modules(package) for arrow in arrows(path, package.parent)]


def _circles(edges: dict[str, set[str]], nodes: list[str]) -> list[list[str]]:
    """The strongly connected components of the graph (Tarjan's algorithm), each a list of its modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            found.append(sorted(component))

    for node in nodes:
        if node not in index:
            connect(node)
    return found


@dataclass(frozen=True)
class Figures:
    modules: int
    top_level: int
    layers: int
    upward: list[Arrow]
    circles: list[list[str]]
    #: Circles once the type-only imports are counted too (they run under a type checker only).
    circles_with_types: list[list[str]]
    import_time_circles: list[list[str]]
    in_function: list[Arrow]

    def __str__(self) -> str:
        def names(groups: list[list[str]]) -> str:
            return "; ".join(", ".join(m.removeprefix("kinetis_queue.") for m in group) for group in groups) or "-"

        return "\n".join(
            [
                f"modules and packages: {self.modules} ({self.top_level} modules at the top of kinetis_queue/)",
                f"layers: {self.layers}",
                f"upward imports: {len(self.upward)}",
                f"circles: {len(self.circles)} ({len(self.import_time_circles)} at import time;"
                f" {len(self.circles_with_types)} counting type-only imports)",
                f"imports of the package's own modules inside functions: {len(self.in_function)}",
                f"circles at import time: {names(self.import_time_circles)}",
                f"circles: {names(self.circles)}",
            ]
        )


def figures(package: Path) -> Figures:
    """The import-graph figures of the package at ``package`` (the module docstring defines each)."""
    root = package.parent
    names = {module_name(path, root) for path in modules(package)}

    def owner(target: str) -> str | None:
        """The package's module an arrow lands in (``a.b.name`` -> ``a.b``), None outside the package."""
        while target not in names and "." in target:
            target = target.rsplit(".", 1)[0]
        return target if target in names else None

    typed = [
        Arrow(arrow.source, target, arrow.type_only, arrow.in_function)
        for arrow in all_arrows(package)
        if (target := owner(arrow.target)) is not None and target != arrow.source
    ]
    own = [arrow for arrow in typed if not arrow.type_only]
    with_types: dict[str, set[str]] = {}
    for arrow in typed:
        with_types.setdefault(arrow.source, set()).add(arrow.target)
    nodes = sorted(names)
    everything: dict[str, set[str]] = {}
    at_import: dict[str, set[str]] = {}
    for arrow in own:
        everything.setdefault(arrow.source, set()).add(arrow.target)
        if not arrow.in_function:
            at_import.setdefault(arrow.source, set()).add(arrow.target)
    import_time = _circles(at_import, nodes)
    group_of = {member: index for index, group in enumerate(import_time) for member in group}
    floor: dict[int, int] = {}

    def floor_of(group: int) -> int:
        if group not in floor:
            below = {group_of[t] for m in import_time[group] for t in at_import.get(m, ()) if group_of[t] != group}
            floor[group] = 1 + max((floor_of(other) for other in below), default=0)
        return floor[group]

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(nodes)))
    return Figures(
        modules=len(nodes),
        top_level=sum(1 for path in package.glob("*.py") if path.name != "__init__.py"),
        layers=max(floor_of(group) for group in range(len(import_time))),
        upward=[a for a in own if floor_of(group_of[a.target]) > floor_of(group_of[a.source])],
        circles=[group for group in _circles(everything, nodes) if len(group) > 1],
        circles_with_types=[group for group in _circles(with_types, nodes) if len(group) > 1],
        import_time_circles=[group for group in import_time if len(group) > 1],
        in_function=[a for a in own if a.in_function],
    )


if __name__ == "__main__":
    checkout = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    print(figures(checkout / "kinetis_queue"))
