"""The kit's own modules and what each imports and reaches of the others, read from their syntax
trees (nothing is imported): shared by tests/test_imports.py (no import circle) and
tests/test_registry.py (no reach into another module's private names or state).

Every import statement counts wherever it stands (at the top, inside a function, under an
``if``). A name is a module of the kit where an import binds it (``import x``, ``import x as
y``, ``from benchmarks import timing``) or where it is assigned the result of a loader call
(``sub = load_submission(path)``, ``harness.load_submission(...)``, ``submission_module(text)``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "benchmarks"
LOADERS = ("load_submission", "submission_module")  # calls that return a submission module
# A loaded file is imported as this module (harness.load_submission's default name).
LOADED_AS = "submission"


def kit_modules() -> dict[str, Path]:
    """{module name: file} of the kit's modules: the top-level files (``eval``, ``harness``,
    ``submission``, ...) and those of benchmarks/ (``benchmarks.timing``, ...); not the tests,
    the examples or the fixtures."""
    out = {p.stem: p for p in sorted(ROOT.glob("*.py"))}
    out.update({f"{PACKAGE}.{p.stem}": p for p in sorted((ROOT / PACKAGE).glob("*.py")) if p.stem != "__init__"})
    return out


def module_name(path: Path) -> str:
    path = Path(path).resolve()
    return f"{PACKAGE}.{path.stem}" if path.parent == (ROOT / PACKAGE).resolve() else path.stem


def _resolve(name: str, importer: str, modules: dict) -> str | None:
    """The kit module that ``import name`` in ``importer`` finds, or None (not the kit's). A
    script of benchmarks/ run as ``python3 benchmarks/NAME.py`` has its own folder first on
    sys.path: a bare name there can be a sibling (``import kitpath``)."""
    if name in modules:
        return name
    if importer.startswith(PACKAGE + ".") and f"{PACKAGE}.{name}" in modules:
        return f"{PACKAGE}.{name}"
    return None


def imports(path: Path, modules: dict | None = None) -> list[tuple[int, str, str | None, str | None]]:
    """(line, kit module, name taken from it or None, local name bound) of every import of a
    kit module in the file at ``path``, at any depth. ``import benchmarks.timing`` binds
    ``benchmarks`` (None here: the package is no module of its own)."""
    modules = kit_modules() if modules is None else modules
    me = module_name(path)
    out = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, me, modules)
                if target:
                    bound = alias.asname or (alias.name if "." not in alias.name else None)
                    out.append((node.lineno, target, None, bound))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of the importer
                base = ".".join([PACKAGE] + ([base] if base else [])) if me.startswith(PACKAGE + ".") else base
            for alias in node.names:
                bound = alias.asname or alias.name
                submodule = _resolve(f"{base}.{alias.name}", me, modules) if base else None
                if submodule and base == PACKAGE:  # from benchmarks import timing: a module
                    out.append((node.lineno, submodule, None, bound))
                    continue
                target = _resolve(base, me, modules) if base else None
                if target:
                    out.append((node.lineno, target, alias.name, bound))
    return out


def import_graph(modules: dict | None = None) -> dict[str, set]:
    """{kit module: the kit modules it imports (itself left out)}."""
    modules = kit_modules() if modules is None else modules
    return {name: {target for _, target, _, _ in imports(path, modules)} - {name} for name, path in modules.items()}


def find_cycle(graph: dict[str, set]) -> list[str]:
    """One import circle of ``graph`` as [a, b, ..., a], or [] when there is none."""
    state: dict = {}  # name -> 1 on the current path, 2 done
    path: list = []

    def visit(node) -> list:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return []


def private(name: str) -> bool:
    """A leading-underscore name that is not a dunder (``__file__``, ``__version__``)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def module_aliases(path: Path, modules: dict | None = None) -> dict[str, str]:
    """{local name: kit module} of the names the file at ``path`` binds to another kit module,
    anywhere in the file: by an import, or by a loader call (``LOADERS``: the module ``submission``)."""
    modules = kit_modules() if modules is None else modules
    me = module_name(path)
    out = {bound: target for _, target, name, bound in imports(path, modules)
           if name is None and bound and target != me}
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in LOADERS:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out[target.id] = LOADED_AS
    return out


def _root_name(node: ast.AST) -> ast.Name | None:
    """The name an attribute or subscript chain starts from (``S`` of ``S._X[k].y``)."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        node = node.value
    return node if isinstance(node, ast.Name) else None


def _first_attribute(node: ast.AST) -> ast.Attribute | None:
    """The attribute right after the root name of a chain (``S._X`` of ``S._X[k].y``)."""
    found = None
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found = node
        node = node.value
    return found


def private_reaches(path: Path, modules: dict | None = None) -> list[tuple[int, str, str]]:
    """(line, kit module, private name) of every use the file at ``path`` makes of another kit
    module's leading-underscore name, whatever the alias: ``from x import _z``, ``y._z`` with
    ``y`` bound to a kit module, ``getattr(y, "_z")`` (and setattr, hasattr, delattr)."""
    modules = kit_modules() if modules is None else modules
    me = module_name(path)
    aliases = module_aliases(path, modules)
    out = [(line, target, name) for line, target, name, _ in imports(path, modules)
           if name is not None and target != me and private(name)]
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and private(node.attr)):
            out.append((node.lineno, aliases[node.value.id], node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) >= 2
              and isinstance(node.args[0], ast.Name) and node.args[0].id in aliases
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and private(node.args[1].value)):
            out.append((node.lineno, aliases[node.args[0].id], node.args[1].value))
    return sorted(set(out))


def state_writes(path: Path, modules: dict | None = None) -> list[tuple[int, str, str]]:
    """(line, kit module, name) of every write the file at ``path`` makes into another kit
    module's state: an assignment, augmented assignment or ``del`` whose target starts at a
    name bound to a kit module (``y.x = ...``, ``y._cache[k] = ...``), and ``setattr(y, ...)``
    / ``delattr(y, ...)``."""
    modules = kit_modules() if modules is None else modules
    aliases = module_aliases(path, modules)
    out = []
    for node in ast.walk(ast.parse(Path(path).read_text())):
        targets = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):  # a, y.x = ...: each element
                targets += target.elts
            elif isinstance(target, ast.Starred):
                targets.append(target.value)
            elif isinstance(target, (ast.Attribute, ast.Subscript)):
                root, first = _root_name(target), _first_attribute(target)
                if root is not None and root.id in aliases and first is not None:
                    out.append((node.lineno, aliases[root.id], first.attr))
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr")
                and node.args and isinstance(node.args[0], ast.Name) and node.args[0].id in aliases):
            name = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else "?"
            out.append((node.lineno, aliases[node.args[0].id], str(name)))
    return sorted(set(out))


def names_taken(module: str, modules: dict | None = None, exclude: tuple = ()) -> dict[str, list]:
    """{name: [file:line, ...]} of every name the other kit modules (but ``exclude``) take from
    ``module``: ``from module import name`` and ``alias.name`` with ``alias`` bound to it."""
    modules = kit_modules() if modules is None else modules
    out: dict = {}
    for name, path in modules.items():
        if name == module or name in exclude:
            continue
        where = f"{path.relative_to(ROOT)}"
        for line, target, taken, _ in imports(path, modules):
            if target == module and taken is not None:
                out.setdefault(taken, []).append(f"{where}:{line}")
        aliases = {a for a, target in module_aliases(path, modules).items() if target == module}
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                out.setdefault(node.attr, []).append(f"{where}:{node.lineno}")
    return out
