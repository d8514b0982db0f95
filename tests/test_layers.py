"""The package's imports point one way (README § Layout): every module imports only from its own package or from
those before it, and no modules import each other in a circle, lazy imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "hfpretrain"
# Each layer may import the layers before it. The top-level helpers (paths, outdir, integrity) come first; the
# command line, the demo and the package's own __init__/__main__ come last.
LAYERS = [
    {"paths", "outdir", "integrity"},
    {"data"},
    {"kernels"},
    {"models"},
    {"training"},
    {"eval"},
    {"study"},
    {"cli", "demo", "__init__", "__main__"},
]


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """hfpretrain modules imported anywhere in ``path`` (absolute and relative, top level or in a function)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "hfpretrain"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] != "hfpretrain":
                continue
            for alias in node.names:  # `from pkg import module` imports the module
                candidate = f"{module}.{alias.name}"
                found.add(candidate if _exists(candidate) else module)
    return found


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _layer(module: str) -> int:
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else "__init__"
    return next(i for i, names in enumerate(LAYERS) if top in names)


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): {m for m in _imports(p) if _exists(m)} for p in PACKAGE.rglob("*.py")}


def test_every_import_points_to_an_earlier_layer_or_its_own():
    upward = [
        f"{module} imports {target}"
        for module, targets in _graph().items()
        for target in targets
        if _layer(target) > _layer(module)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(sorted(upward))


def test_no_import_circles():
    graph = _graph()
    # a package's __init__ re-exporting its modules is not a circle with them
    edges = {
        m: {t for t in ts if not (graph.get(t) is not None and t.count(".") < m.count(".") and m.startswith(t + "."))}
        for m, ts in graph.items()
    }
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in edges.get(node, ()):
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt) :] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import circles:\n" + "\n".join(cycles)


def test_the_check_sees_an_upward_import(tmp_path):
    """The parser itself: a relative import from data/ into training/ is found and placed in its layer."""
    assert _layer("hfpretrain.training.run") > _layer("hfpretrain.data.order")
    assert "hfpretrain.training.run" in _imports(PACKAGE / "training" / "__init__.py")
    assert "hfpretrain.data.order" in _imports(PACKAGE / "training" / "run.py")
