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
                      "if TYPE_CHECKING:\n    from lucid_hub.demo import processes\n", encoding="utf-8")
    found = imports(sample, "lucid_hub.rdf.probe")
    assert found == {"lucid_hub.runtime", "lucid_hub.errors", "lucid_hub.web", "lucid_hub.cli",
                     "lucid_hub.demo"}
    table = layers()
    assert sorted(t for t in found if table[unit_of(t)] > table["rdf"]) == [
        "lucid_hub.cli", "lucid_hub.demo", "lucid_hub.runtime", "lucid_hub.web"]


def test_the_hub_uses_the_benchmarks_only_to_run_them() -> None:
    """`lucid_bench` (benchmarks and hostile partners, beside the package) may use the hub; the
    hub imports it only where `lucid-hub bench` runs one."""
    users = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name == "lucid_bench" or name.startswith("lucid_bench.") for name in names):
                users.add(module_name(path))
    assert users == {"lucid_hub.cli.bench"}


# The composition root builds the parts and wires them; nothing else reaches into another
# unit's objects to change them (that is how a cycle hid from the import graph: attributes
# patched after construction).
COMPOSITION_ROOT = {"lucid_hub.runtime"}
# Units whose objects are records, written by whoever holds them: the database's rows (an ORM
# row's fields are set to update it in its session).
RECORDS = {"db"}


def _own_attributes() -> dict[str, set[str]]:
    """Unit -> the attribute names its classes hold: assigned on `self`, or declared in a class
    body (dataclass fields)."""
    out: dict[str, set[str]] = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        unit = unit_of(module_name(path))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in _assigned(node):
                if isinstance(target.value, ast.Name) and target.value.id == "self":
                    out[unit].add(target.attr)
            if isinstance(node, ast.ClassDef):
                out[unit].update(item.target.id for item in node.body
                                 if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name))
    return out


def _assigned(node: ast.AST) -> list[ast.Attribute]:
    """The attribute targets an assignment (or setattr with a literal name) writes."""
    targets: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        for target in node.targets:
            targets.extend(target.elts if isinstance(target, ast.Tuple) else [target])
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets.append(node.target)
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
          and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        targets.append(ast.Attribute(value=node.args[0], attr=node.args[1].value, ctx=ast.Store(),
                                     lineno=node.lineno, col_offset=node.col_offset))
    return [t for t in targets if isinstance(t, ast.Attribute)]


def foreign_assignments(path: Path, owners: dict[str, set[str]], module: str | None = None) -> list[str]:
    """`obj.attr = …` (or `setattr(obj, "attr", …)`) in a module, where `obj` is a plain name
    other than `self`/`cls` (a parameter or local holding another object) and `attr` is held
    by objects of another unit of the hub and by none of this module's own unit. (An object
    configuring its own parts, `self.part.attr = …`, is its own business.)"""
    module = module or module_name(path)
    unit = unit_of(module)
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        for target in _assigned(node):
            if not isinstance(target.value, ast.Name) or target.value.id in ("self", "cls"):
                continue
            if any(target.attr in owners.get(records, ()) for records in RECORDS):
                continue  # (a row's field, by its name)
            others = sorted(u for u, attrs in owners.items() if u != unit and target.attr in attrs)
            if others and target.attr not in owners.get(unit, set()):
                found.append(f"{module}:{target.lineno} sets .{target.attr} (held by {', '.join(others)})")
    return found


def test_only_the_composition_root_sets_attributes_of_another_units_objects() -> None:
    owners = _own_attributes()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if module_name(path) not in COMPOSITION_ROOT:
            found.extend(foreign_assignments(path, owners))
    assert found == []


def test_the_check_sees_a_patched_attribute(tmp_path: Path) -> None:
    """The check finds what the publisher's rules were once bound by (so it could fail)."""
    sample = tmp_path / "probe.py"
    sample.write_text("def bind(publisher, rules):\n    publisher.hooks = rules\n"
                      "    setattr(publisher, 'relay', None)\n    self_like = 1\n", encoding="utf-8")
    owners = {"publish": {"hooks", "relay"}, "rules": {"parts"}}
    assert foreign_assignments(sample, owners, "lucid_hub.rules.probe") == [
        "lucid_hub.rules.probe:2 sets .hooks (held by publish)",
        "lucid_hub.rules.probe:3 sets .relay (held by publish)"]


MAX_METHODS, MAX_CLASS_LINES, MAX_MODULE_LINES = 20, 400, 500


def size_exceptions() -> dict[str, str]:
    """`path` or `path:Class` -> the reason docs/architecture.md gives for its size."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = re.search(r"```sizes\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```sizes block"
    out = {}
    for line in block.group(1).strip().splitlines():
        name, reason = line.split(": ", 1)
        out[name] = reason
    return out


def oversized(root: Path = PACKAGE) -> set[str]:
    """Modules over MAX_MODULE_LINES, classes over MAX_METHODS methods or MAX_CLASS_LINES lines."""
    found = set()
    for path in sorted(root.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(REPO).as_posix() if root == PACKAGE else path.name
        if source.count("\n") > MAX_MODULE_LINES:
            found.add(name)
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ClassDef):
                methods = [b for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
                assert node.end_lineno is not None
                if len(methods) > MAX_METHODS or node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                    found.add(f"{name}:{node.name}")
    return found


def test_classes_and_modules_stay_small_unless_the_map_says_why() -> None:
    exceptions = size_exceptions()
    found = oversized()
    assert sorted(found - set(exceptions)) == [], "too large, and docs/architecture.md (```sizes) gives no reason"
    assert sorted(set(exceptions) - found) == [], "the ```sizes block names what is no longer too large"


def test_the_size_check_sees_a_large_class(tmp_path: Path) -> None:
    methods = "".join(f"    def m{i}(self) -> None:\n        pass\n" for i in range(MAX_METHODS + 1))
    (tmp_path / "big.py").write_text(f"class Big:\n{methods}", encoding="utf-8")
    (tmp_path / "small.py").write_text("class Small:\n    def one(self) -> None:\n        pass\n", encoding="utf-8")
    assert oversized(tmp_path) == {"big.py:Big"}
