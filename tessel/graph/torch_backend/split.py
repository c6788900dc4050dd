"""An exported ATen graph cut into the largest pieces tessel translates (torch.fx's
CapabilityBasedPartitioner over tessel.graph.frontend.torch_import.ATEN, plus the operators
whose inputs are known at import, which torch runs then: Hugging Face's masks from arange),
each compiled as a model (after tuning their tasks together with `tune=N`) and wrapped as a
torch module; the rest left to PyTorch, said in one line."""
from __future__ import annotations

import copy
import logging
from collections import Counter
from typing import Any

from tessel.database import Database
from tessel.errors import TesselError
from tessel.extras import require
from tessel.graph.compiler import compile_model, graph_tasks, load_model, select_graph
from tessel.graph.compiler.tasks import extract_tasks
from tessel.graph.frontend.torch_import import ATEN, INPUT, Importer, target_name
from tessel.graph.ir import Graph, GraphError, check
from tessel.graph.layout import DEFAULT_LAYOUT, apply_layout
from tessel.graph.runtime import CompiledModel
from tessel.graph.torch_backend.options import BackendOptions, say
from tessel.target import Target
from tessel.tuning import tune_tasks

torch = require("torch", "the torch.compile backend")
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner  # noqa: E402
from torch.export.graph_signature import InputKind  # noqa: E402
from torch.fx.passes.operator_support import OperatorSupport  # noqa: E402

log = logging.getLogger("tessel")
NOT_COMPUTE = ("aten._assert", "aten.sym_", "aten._check", "_assert")  # guards, not operators
LAYOUT_ONLY = {"getitem", "aten.view.default", "aten.reshape.default",
               "aten._unsafe_view.default", "aten.flatten.using_ints", "aten.squeeze.dim",
               "aten.unsqueeze.default", "aten.contiguous.default", "aten.clone.default",
               "aten.alias.default", "aten.detach.default", "aten.dropout.default",
               "aten.dropout_.default"}


class Split:
    """An exported graph cut into pieces tessel compiles, the rest left to PyTorch."""

    def __init__(self, program: Any, args: list[Any], constant: list[bool], name: str) -> None:
        self.fx, self.name = program.graph_module, name
        placeholders = [n for n in self.fx.graph.nodes if n.op == "placeholder"]
        # what feeds each placeholder: Dynamo's k-th argument, or a tensor torch.export lifted
        # out of the graph (a constant, a buffer or parameter the graph module held)
        self.feeds: list[tuple[str, Any]] = []
        user = 0
        for spec in program.graph_signature.input_specs:
            if spec.kind == InputKind.USER_INPUT:
                self.feeds.append(("arg", user))
                user += 1
            else:
                lifted = (program.state_dict[spec.target] if spec.target in program.state_dict
                          else program.constants[spec.target])
                self.feeds.append(("lifted", lifted.clone()))  # (no view: detach_ on it)
        check(len(placeholders) == len(self.feeds) and user == len(args),
              f"graph {name}: the exported program takes {len(placeholders)} inputs, Dynamo "
              f"passed {len(args)}")
        self.bindings: dict[str, Any] = {}
        for node, (kind, feed) in zip(placeholders, self.feeds):
            arg, weight = (args[feed], constant[feed]) if kind == "arg" else (feed, True)
            self.bindings[node.name] = (arg.detach() if weight else
                                        INPUT if hasattr(arg, "shape") else arg)
        self.refused: dict[str, str] = {}  # node -> why tessel's converter refused it
        self.constant = known_at_import(self.fx.graph, self.bindings)

    def build(self, options: BackendOptions) -> Any:
        for _ in range(len(self.fx.graph.nodes) + 1):
            gm, pieces = self.cut()
            try:
                graphs = {name: self.translate(gm, name) for name in pieces}
                break
            except _Refused as r:
                self.refused.update(dict.fromkeys(r.nodes, str(r)))
        else:
            raise GraphError(f"graph {self.name}: splitting it did not settle (a tessel bug)")
        compiled = compile_pieces(graphs, options)
        failed = []
        for name, model in compiled.items():
            if isinstance(model, TesselError):
                failed.append(f"{name} ({model})")
                continue
            setattr(gm, name, Piece(model, getattr(gm, name)))
        self.report(gm, failed)
        gm.recompile()
        if all(kind == "arg" for kind, _ in self.feeds):
            return gm
        feeds = self.feeds
        return lambda *args: gm(*(args[x] if kind == "arg" else x for kind, x in feeds))

    def cut(self) -> tuple[Any, list[str]]:
        """A copy of the graph with each piece tessel can take fused into a submodule."""
        split = self

        class Supported(OperatorSupport):
            def is_node_supported(self, submodules: Any, node: Any) -> bool:
                return split.supported(node)

        gm = copy.deepcopy(self.fx)
        partitioner = CapabilityBasedPartitioner(gm, Supported(),
                                                 allows_single_node_partition=True)
        partitions = [p for p in partitioner.propose_partitions() if self.worth(p.nodes)]
        gm = partitioner.fuse_partitions(partitions)
        pieces = [n.target for n in gm.graph.nodes if n.op == "call_module"]
        return gm, pieces

    def supported(self, node: Any) -> bool:
        """Whether tessel's importer takes `node`: an operator it translates, or one it runs
        at import (its inputs known then: torch.arange, a mask made from shapes)."""
        if node.op != "call_function" or node.name in self.refused:
            return False
        if target_name(node.target) == "getitem":
            return all(self.supported(a) for a in node.all_input_nodes)
        return target_name(node.target) in ATEN or node.name in self.constant

    def worth(self, nodes: Any) -> bool:
        """Whether a piece computes anything at run time (a lone view or getitem, or values
        known at import, stay in PyTorch)."""
        return any(target_name(n.target) not in LAYOUT_ONLY and n.name not in self.constant
                   for n in nodes)

    def translate(self, gm: Any, name: str) -> Graph:
        """The tessel graph of piece `name` of `gm`; raises `_Refused` naming the nodes to leave
        out when the importer refuses one."""
        sub = getattr(gm, name)
        call = next(n for n in gm.graph.nodes if n.op == "call_module" and n.target == name)
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        bindings = {p.name: self.binding(a) for p, a in zip(placeholders, call.args)}
        importer = Importer(sub.graph, f"{self.name}_{name}", bindings)
        try:
            return importer.run()
        except GraphError as e:
            node = importer.node
            if node is not None and node.op == "call_function":
                raise _Refused({node.name}, str(e)) from None
            if node is not None and node.op == "placeholder":  # an input it cannot take
                raise _Refused({u.name for u in node.users}, str(e)) from None
            raise _Refused({n.name for n in sub.graph.nodes if n.op == "call_function"},
                           str(e)) from None

    def binding(self, arg: Any) -> Any:
        if hasattr(arg, "op") and arg.op == "placeholder":
            return self.bindings[arg.name]
        return INPUT if hasattr(arg, "op") else arg

    def report(self, gm: Any, failed: list[str]) -> None:
        """One line naming the operators left to PyTorch, by reason."""
        why: dict[str, Counter] = {}
        for n in gm.graph.nodes:
            target = target_name(n.target)
            if n.op != "call_function" or target == "getitem" or target.startswith(NOT_COMPUTE):
                continue
            reason = ("no translation in tessel" if target not in ATEN else
                      _short(self.refused.get(n.name, "not worth a kernel of its own")))
            why.setdefault(reason, Counter())[target] += 1
        if why:
            parts = [", ".join(f"{t} x{c}" if c > 1 else t for t, c in sorted(ops.items()))
                     + f" ({reason})" for reason, ops in why.items()]
            count = sum(sum(ops.values()) for ops in why.values())
            say(f"graph {self.name}: {count} operator(s) run in PyTorch: {'; '.join(parts)}")
        for piece in failed:
            say(f"graph {self.name}: piece {piece} runs in PyTorch")




def known_at_import(graph: Any, bindings: dict[str, Any]) -> set[str]:
    """The nodes of an exported `graph` whose values tessel's importer computes at import
    (torch_import.Importer.foldable): placeholders bound to tensors or Python values (weights,
    lifted constants), and deterministic ATen calls whose inputs all are such nodes."""
    known: set[str] = set()
    for node in graph.nodes:
        if node.op == "placeholder":
            constant = bindings.get(node.name, INPUT) is not INPUT
        elif node.op == "call_function" and target_name(node.target) == "getitem":
            constant = all(a.name in known for a in node.all_input_nodes)
        else:
            constant = (node.op == "call_function" and _deterministic(node.target)
                        and all(a.name in known for a in node.all_input_nodes))
        if constant:
            known.add(node.name)
    return known


def _deterministic(target: Any) -> bool:
    return (isinstance(target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded not in target.tags)


class _Refused(Exception):
    def __init__(self, nodes: set[str], why: str) -> None:
        super().__init__(why)
        self.nodes = nodes


def _short(reason: str) -> str:
    """A converter's refusal without the node it names (the line names the operator)."""
    return reason.split("): ", 1)[-1] if reason.startswith("node ") else reason


def compile_pieces(graphs: dict[str, Graph], options: BackendOptions
                   ) -> dict[str, CompiledModel | TesselError]:
    """Each piece compiled (after tuning them with `options.tune` trials in all); a piece that
    does not compile maps to its error (it runs in PyTorch)."""
    target = options.target
    graphs = {name: load_model(g) for name, g in graphs.items()}
    if options.tune and graphs:
        tune_pieces(list(graphs.values()), target, options)
    db = Database.open(options.database, create=False)
    out: dict[str, CompiledModel | TesselError] = {}
    for name, graph in graphs.items():
        try:
            out[name] = compile_model(graph, target, db, fallback=options.fallback,
                                      layout=options.layout)
        except TesselError as e:
            out[name] = e
            continue
        log.info("%s", out[name].report())
        missing = [s.task.label for s in out[name].statuses if not s.tuned]
        if options.strict and missing:
            where = options.database or "no database"
            raise GraphError(f"torch.compile backend tessel (strict): {len(missing)} task(s) of "
                             f"graph {graph.name} have no record in {where}: "
                             f"{', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; "
                             f"tune them (options tune=N) or leave strict off")
    return out


def tune_pieces(graphs: list[Graph], target: Target, options: BackendOptions) -> None:
    """Tune the distinct tasks of every piece within `options.tune` trials in all, then choose
    each piece's kernels in its sequence (tessel.graph.compiler.select)."""
    layout = options.layout if options.layout != "auto" else DEFAULT_LAYOUT
    laid = [apply_layout(graph, layout, target) for graph in graphs]
    kernels = [k for graph in laid for k in graph_tasks(graph, target)[0]]
    tasks = extract_tasks(kernels, target)  # one task per distinct kernel of all the pieces
    if not tasks:
        return
    results = tune_tasks(tasks, options.tune, database=options.database)
    if not any(r.interrupted for r in results):
        db = Database.open(options.database, create=False)
        for graph in laid:
            select_graph(graph, target, db, layout=layout)


class Piece(torch.nn.Module):
    """A fused submodule run by tessel: torch tensors in and out, weights bound at compile."""

    def __init__(self, model: CompiledModel, sub: Any) -> None:
        super().__init__()
        self.model = model
        placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        self.inputs = [(k, p.name) for k, p in enumerate(placeholders)
                       if p.name in model.input_names]
        result = next(n for n in sub.graph.nodes if n.op == "output").args[0]
        self.several = isinstance(result, (tuple, list))
        outs = list(result) if self.several else [result]
        self.shapes = [tuple(o.meta["val"].shape) for o in outs]
        self.dtypes = [o.meta["val"].dtype for o in outs]

    def forward(self, *args: Any) -> Any:
        feeds = {name: _as_numpy(args[k]) for k, name in self.inputs}
        outs = self.model(**feeds)
        tensors = tuple(torch.from_numpy(a.reshape(shape)).to(dtype)  # (no view)
                        for a, shape, dtype in zip(outs, self.shapes, self.dtypes))
        return tensors if self.several else tensors[0]


def _as_numpy(t: Any) -> Any:
    t = t.detach()
    return (t if t.is_contiguous() else t.contiguous()).numpy()


__all__ = ["LAYOUT_ONLY", "NOT_COMPUTE", "Piece", "Split", "compile_pieces", "known_at_import",
           "tune_pieces"]
