"""The import graph of lucid_hub/ keeps to the layers docs/architecture.md writes down: no
import goes up a layer, no two modules import each other (directly or round a cycle), and
every module is in the table. Imports inside functions and under TYPE_CHECKING count too."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "lucid_hub"


def layers() -> dict[str, int]:
    """Unit (top-level module or package of lucid_hub) -> layer index, from the doc's table."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```layers block"
    out: dict[str, int] = {}
    for index, line in enumerate(block.group(1).strip().splitlines()):
        _name, units = line.split(":", 1)
        for unit in units.split():
            assert unit not in out, f"{unit} is in two layers"
            out[unit] = index
    return out


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path) -> str:
    name = ".".join(path.relative_to(REPO).with_suffix("").parts)
    return name.removesuffix(".__init__")


def imports(path: Path, module: str | None = None) -> set[str]:
    """The lucid_hub modules a file (of module `module`) imports (`from lucid_hub import x`
    names lucid_hub.x when x is a module or package)."""
    module = module or module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("lucid_hub"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: (None if path.name == "__init__.py" else -1)]
                base = base[: len(base) - (node.level - 1)]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            if name == "lucid_hub":
                for alias in node.names:
                    is_module = (PACKAGE / alias.name).is_dir() or (PACKAGE / f"{alias.name}.py").exists()
                    found.add(f"lucid_hub.{alias.name}" if is_module else "lucid_hub")
            elif name.startswith("lucid_hub."):
                found.add(name)
    return found


def unit_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        source = unit_of(module_name(path))
        for target in imports(path):
            if unit_of(target) != source:
                graph[source].add(unit_of(target))
    return graph


def test_every_module_has_a_layer() -> None:
    table = layers()
    units = {unit_of(module_name(p)) for p in PACKAGE.rglob("*.py")}
    assert sorted(units - set(table)) == [], "modules missing from docs/architecture.md's layer table"
    assert sorted(set(table) - units) == [], "the layer table names modules that do not exist"


def test_no_import_goes_up_a_layer() -> None:
    table = layers()
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        for target in sorted(imports(path)):
            if table[unit_of(target)] > table[unit_of(source)]:
                upward.append(f"{source} -> {target}")
    assert upward == []


def test_no_cycles_between_modules() -> None:
    graph = unit_graph()
    cycles = []
    for start in sorted(graph):
        seen, stack = set(), list(graph[start])
        while stack:
            node = stack.pop()
            if node == start:
                cycles.append(start)
                break
            if node not in seen:
                seen.add(node)
                stack.extend(graph.get(node, ()))
    assert cycles == []


def test_the_checks_see_an_upward_import(tmp_path: Path) -> None:
    """The import reader finds the forms an upward import can take (so the checks above
    could fail): from the package, relative, inside a function, under TYPE_CHECKING."""
    sample = tmp_path / "probe.py"
    sample.write_text("from lucid_hub import runtime, errors\nfrom ..web import app\n"
                      "def f():\n    import lucid_hub.cli\n"
                      "if TYPE_CHECKING:\n    from lucid_hub.tools.bench import e2e\n", encoding="utf-8")
    found = imports(sample, "lucid_hub.rdf.probe")
    assert found == {"lucid_hub.runtime", "lucid_hub.errors", "lucid_hub.web", "lucid_hub.cli",
                     "lucid_hub.tools.bench"}
    table = layers()
    assert sorted(t for t in found if table[unit_of(t)] > table["rdf"]) == [
        "lucid_hub.cli", "lucid_hub.runtime", "lucid_hub.tools.bench", "lucid_hub.web"]
