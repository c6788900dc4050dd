"""The package's layering, read from its source: no import cycle between tessel's packages
(and top-level modules), graph/ built on tuning and never the reverse, and no import tucked
inside a function to dodge a cycle between packages (those left import optional extras or a
sibling module of the same package)."""
import ast
from collections import defaultdict
from pathlib import Path

import tessel

ROOT = Path(tessel.__file__).parent
UNITS = {p.stem for p in ROOT.glob("*.py") if p.stem != "__init__"} | {
    p.name for p in ROOT.iterdir() if (p / "__init__.py").exists()}


def unit(module: str) -> str | None:
    """The package or top-level module of tessel that `module` belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "tessel" and len(parts) > 1 and parts[1] in UNITS else None


def imports(tree: ast.AST):
    """(imported tessel module, inside a function?) for every import of a module's AST."""
    inner = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
             for n in ast.walk(f)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = ([f"tessel.{a.name}" for a in node.names] if node.module == "tessel"
                     else [node.module])
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            yield name, id(node) in inner


def import_graph():
    edges, lazy = defaultdict(set), []
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = unit(module)
        if here is None:
            continue
        for name, in_function in imports(ast.parse(path.read_text())):
            there = unit(name)
            if there is not None and there != here:
                edges[here].add(there)
                if in_function:
                    lazy.append(f"{module} imports {name} inside a function")
    return edges, lazy


def reachable(edges, start):
    seen, stack = set(), [start]
    while stack:
        for nxt in edges.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def test_no_import_cycle_between_packages():
    edges, _ = import_graph()
    cycles = sorted(f"{a} -> {b}" for a in edges for b in edges[a] if a in reachable(edges, b))
    assert cycles == []


def test_graph_builds_on_tuning_and_nothing_below_knows_either():
    edges, _ = import_graph()
    assert "tuning" in edges["graph"]
    for low in ("ir", "arith", "te", "schedule", "codegen", "measure", "database", "space",
                "search", "cost_model", "features", "ops"):
        assert not {"tuning", "graph", "cli"} & reachable(edges, low), low
    assert "graph" not in reachable(edges, "tuning")


def test_no_import_between_packages_hides_in_a_function():
    _, lazy = import_graph()
    assert lazy == []


def test_the_walk_sees_the_imports_it_checks():
    edges, _ = import_graph()
    assert {"schedule", "codegen", "measure", "search", "space"} <= edges["tuning"]
    assert UNITS >= {"te", "tuning", "cli", "graph", "schedule", "target", "errors"}


def test_codegen_passes_never_import_the_printer():
    """The lowering passes know the lowered IR and each other, never the C printer (c.py,
    c_expr.py, c_vector.py) or the build: the printer prints what they decided."""
    seen, wrong = set(), []
    for path in (ROOT / "codegen" / "passes").glob("*.py"):
        for name, _ in imports(ast.parse(path.read_text())):
            seen.add(name)
            if name.startswith("tessel.codegen") and name != "tessel.codegen.lowered" and \
                    not name.startswith("tessel.codegen.passes"):
                wrong.append(f"codegen/passes/{path.name} imports {name}")
    assert wrong == []
    assert {"tessel.codegen.lowered", "tessel.codegen.passes.affine"} <= seen


# graph/'s parts, each importing only the parts before it (and itself): the IR and its
# operators, the rewrites on it, the front ends that build graphs, the runtime that runs
# built kernels, the model compiler, and the torch.compile backend on top
GRAPH_PARTS = {"ir": "ir", "ops": "ir", "opdefs": "ir", "reference": "ir", "lowering": "ir",
               "fold": "rewrites", "fuse": "rewrites", "layout": "rewrites",
               "winograd": "rewrites", "spellings": "rewrites", "passes": "rewrites",
               "frontend": "frontend", "runtime": "runtime", "export": "runtime",
               "compiler": "compiler", "torch_backend": "torch_backend"}
GRAPH_MAY_IMPORT = {"ir": {"ir"}, "rewrites": {"ir", "rewrites"},
                    "frontend": {"ir", "frontend"}, "runtime": {"ir", "rewrites", "runtime"},
                    "compiler": {"ir", "rewrites", "frontend", "runtime", "compiler"},
                    "torch_backend": set(GRAPH_PARTS.values())}


def graph_part(module: str) -> str | None:
    parts = module.split(".")
    if parts[:2] != ["tessel", "graph"] or len(parts) < 3:
        return None
    return GRAPH_PARTS.get(parts[2], "?" + parts[2])


def test_graph_parts_import_only_the_parts_below_them():
    """Every import inside tessel/graph, lazy ones and type-checking ones included, goes from
    a part to itself or a part below it: so no two files of different parts import each other,
    the runtime runs without the compiler, and the front ends without either."""
    wrong, seen = [], set()
    for path in (ROOT / "graph").rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        here = graph_part(module)
        for name, _ in imports(ast.parse(path.read_text())):
            there = graph_part(name)
            if here is None or there is None:
                continue
            seen.add((here, there))
            if there not in GRAPH_MAY_IMPORT.get(here, set()):
                wrong.append(f"{module} ({here}) imports {name} ({there})")
    assert wrong == []
    assert {("compiler", "runtime"), ("compiler", "frontend"), ("rewrites", "ir"),
            ("torch_backend", "compiler")} <= seen


def test_the_exported_models_loader_stands_alone():
    """tessel.runtime loads exported models where numpy is all there is: it imports nothing of
    tessel but its errors (and tessel/__init__ imports nothing eagerly: test_export.py runs
    it with the rest hidden)."""
    edges, _ = import_graph()
    assert edges.get("runtime", set()) <= {"errors"}
    assert "runtime" in edges["graph"]  # (the export writes what it reads)
