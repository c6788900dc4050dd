"""`torch.compile(model, backend="tessel")`: tessel's kernels where PyTorch users already are.

    fast = torch.compile(model, backend="tessel", options={"database": "tessel.db"})
    with torch.no_grad():
        y = fast(x)                          # torch tensors in, torch tensors out

The backend is registered under the name "tessel" when tessel is installed (the
`torch_dynamo_backends` entry point); nothing needs importing first.

TorchDynamo hands the backend an FX graph of torch calls in which the module's parameters and
buffers are placeholders, with example inputs. The backend
1. exports the graph (torch.export) on the concrete inputs into ATen operators, binding the
   parameter and buffer placeholders to the module's tensors as constants: tessel folds batch
   norms into them and packs weights once, as it does for an ONNX model;
2. splits the ATen graph into the largest pieces tessel translates (torch.fx's
   CapabilityBasedPartitioner over `tessel.graph.torch_import.ATEN`; a node whose converter
   refuses its arguments is left out and the split redone) and leaves every other operator to
   PyTorch, saying once, in one line, which operators those are;
3. compiles each piece with `tessel.compile_model`: tuned kernels where the database holds
   records, the fallback (expert priors by default) elsewhere; with `tune=N` it first tunes
   the pieces' tasks for N trials in all.

Options (`torch.compile(..., options={...})`): "database" (a path; default ./tessel.db when it
exists, as the `tessel` command writes it), "fallback" ("prior" or "unscheduled"), "tune"
(trials, default 0), "strict" (raise when a task has no record), "layout" (as compile_model),
"target" (default "host").

Guards. Dynamo recompiles when an input's shape, dtype or the grad mode changes. When it hands
over a graph with dynamic shapes (its automatic dynamic shapes, after a second shape, or
`dynamic=True`) the backend compiles once per concrete input shape it meets (the last 8 are
kept). Weights are read at compile time, as onnxruntime reads them: a weight changed in place
(`load_state_dict`, an optimizer step) or replaced is noticed at the next call and the graph
compiled again. tessel computes inference only: compiling while gradients are enabled for a
tensor that requires them raises, naming `torch.no_grad()`.

Tensors cross into tessel without copies where their memory allows (contiguous tensors are
viewed as numpy arrays, outputs are wrapped by torch.from_numpy); the executor copies inputs
into its planned memory and its outputs out, as on every call of a compiled model.
"""
from __future__ import annotations

import copy
import logging
import warnings
from collections import Counter, OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from tessel.database import Database
from tessel.errors import TesselError
from tessel.extras import require
from tessel.graph.executor import (FALLBACKS, CompiledModel, compile_model, load_model,
                                   model_tasks)
from tessel.graph.ir import Graph, GraphError, check
from tessel.graph.layout import DEFAULT_LAYOUT, LAYOUTS
from tessel.graph.select import select_in_sequence
from tessel.graph.tasks import extract_tasks
from tessel.graph.torch_import import ATEN, INPUT, Importer, _target_name
from tessel.target import Target
from tessel.tuning import tune_tasks

torch = require("torch", "the torch.compile backend")
from torch._dynamo.source import is_from_unspecialized_param_buffer_source  # noqa: E402
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner  # noqa: E402
from torch.fx.passes.operator_support import OperatorSupport  # noqa: E402

log = logging.getLogger("tessel")
DEFAULT_DATABASE = "tessel.db"  # the `tessel` command's default
KEEP_SHAPES = 8  # compiled programs kept per dynamic graph (least recently used dropped)
NOT_COMPUTE = ("aten._assert", "aten.sym_", "aten._check", "_assert")  # guards, not operators


class TorchFallbackWarning(UserWarning):
    """Operators of a compiled graph that run in PyTorch, not in tessel."""


@dataclass(frozen=True)
class BackendOptions:
    """`torch.compile(..., options={...})` for the tessel backend (see the module doc)."""
    database: str | None = None
    fallback: str = "prior"
    tune: int = 0
    strict: bool = False
    layout: str = DEFAULT_LAYOUT
    target: Target | str = "host"

    @classmethod
    def parse(cls, options: dict | None) -> "BackendOptions":
        options = dict(options or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(options) - known)
        check(not unknown, f"torch.compile backend tessel: unknown option(s) {unknown}; its "
                           f"options are {sorted(known)}")
        tune = options.get("tune", 0)
        check(isinstance(tune, int) and not isinstance(tune, bool) and tune >= 0,
              f"torch.compile backend tessel: tune must be an int >= 0 (trials), got {tune!r}")
        fallback = options.get("fallback", "prior")
        check(fallback in FALLBACKS, f"torch.compile backend tessel: fallback must be one of "
                                     f"{FALLBACKS}, got {fallback!r}")
        layout = options.get("layout", DEFAULT_LAYOUT)
        check(layout in (*LAYOUTS, "auto"), f"torch.compile backend tessel: layout must be one "
                                            f"of {(*LAYOUTS, 'auto')}, got {layout!r}")
        strict = options.get("strict", False)
        check(isinstance(strict, bool), f"torch.compile backend tessel: strict must be True or "
                                        f"False, got {strict!r}")
        database = options.get("database")
        if database is None and (tune or Path(DEFAULT_DATABASE).exists()):
            database = DEFAULT_DATABASE
        check(database is None or isinstance(database, (str, Path)),
              f"torch.compile backend tessel: database must be a path, got {database!r}")
        if database is not None and not tune:
            check(Path(database).exists(), f"torch.compile backend tessel: database {database} "
                                           f"does not exist (tune=N creates it)")
        target = options.get("target", "host")
        if not isinstance(target, Target):
            target = Target(target)  # a bad target names itself here, not at the first call
        return cls(None if database is None else str(database), fallback, tune, strict, layout,
                   target)


def tessel_backend(gm: Any, example_inputs: Sequence[Any], options: dict | None = None,
                   mode: str | None = None) -> Callable[..., Any]:
    """The TorchDynamo backend: `gm` (an FX GraphModule of torch calls) and its example inputs
    -> a callable taking the same arguments (see the module doc)."""
    check(mode in (None, "default"), f"torch.compile backend tessel has no modes (got "
                                     f"mode={mode!r}); pass options={{...}} instead")
    return TesselGraph(gm, list(example_inputs), BackendOptions.parse(options))


class TesselGraph:
    """One Dynamo graph: the programs compiled for it, one per input signature."""

    def __init__(self, gm: Any, example_inputs: list[Any], options: BackendOptions) -> None:
        self.gm, self.options = gm, options
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        check(len(placeholders) == len(example_inputs),
              f"Dynamo gave {len(example_inputs)} example inputs for {len(placeholders)} "
              f"placeholders")
        self.constant = [_is_weight(n) for n in placeholders]
        self.programs: OrderedDict[tuple, Callable] = OrderedDict()
        dynamic = any(isinstance(x, torch.SymInt) or _symbolic(x) for x in example_inputs)
        _refuse_gradients(example_inputs)
        if dynamic:
            _say(f"graph {_name(gm)} has dynamic shapes; tessel compiles it for each "
                 f"input shape it meets (torch.compile(..., dynamic=False) says so to Dynamo)")
        else:
            self.programs[self.key(example_inputs)] = self.compile(example_inputs)

    def __call__(self, *args: Any) -> Any:
        key = self.key(args)
        program = self.programs.get(key)
        if program is None:
            _refuse_gradients(args)
            program = self.programs[key] = self.compile(list(args))
            while len(self.programs) > KEEP_SHAPES:
                self.programs.popitem(last=False)
        else:
            self.programs.move_to_end(key)
        return program(*args)

    def key(self, args: Sequence[Any]) -> tuple:
        """What a program was compiled for: the inputs' shapes and dtypes, the values of
        integer inputs, and each weight's storage and version (changed in place: a new key)."""
        out = []
        for a, weight in zip(args, self.constant):
            if weight:
                out.append((a.data_ptr(), _version(a)))
            elif hasattr(a, "shape"):
                out.append((tuple(a.shape), a.dtype))
            else:
                out.append(int(a) if hasattr(a, "__int__") else a)
        return tuple(out)

    def compile(self, args: list[Any]) -> Callable:
        args = [int(a) if isinstance(a, torch.SymInt) else a for a in args]
        try:
            program = torch.export.export(self.gm, tuple(args))
        except Exception as e:  # noqa: BLE001  torch raises many types
            _say(f"torch.export could not trace graph {_name(self.gm)} "
                 f"({type(e).__name__}: {str(e).strip().splitlines()[0]}); it runs in PyTorch")
            return self.gm.forward
        split = Split(program.graph_module, args, self.constant, _name(self.gm))
        return split.build(self.options)


class Split:
    """An exported graph cut into pieces tessel compiles, the rest left to PyTorch."""

    def __init__(self, fx: Any, args: list[Any], constant: list[bool], name: str) -> None:
        self.fx, self.name = fx, name
        placeholders = [n for n in fx.graph.nodes if n.op == "placeholder"]
        check(len(placeholders) == len(args), f"graph {name}: the exported program takes "
                                              f"{len(placeholders)} inputs, Dynamo passed "
                                              f"{len(args)}")
        self.bindings: dict[str, Any] = {}
        for node, arg, weight in zip(placeholders, args, constant):
            self.bindings[node.name] = (arg.detach() if weight else
                                        INPUT if hasattr(arg, "shape") else arg)
        self.refused: dict[str, str] = {}  # node -> why tessel's converter refused it

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
        return gm

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
        if node.op != "call_function" or node.name in self.refused:
            return False
        if _target_name(node.target) == "getitem":
            return all(self.supported(a) for a in node.all_input_nodes)
        return _target_name(node.target) in ATEN

    @staticmethod
    def worth(nodes: Any) -> bool:
        """Whether a piece computes anything (a lone view or getitem stays in PyTorch)."""
        return any(_target_name(n.target) not in LAYOUT_ONLY for n in nodes)

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
            target = _target_name(n.target)
            if n.op != "call_function" or target == "getitem" or target.startswith(NOT_COMPUTE):
                continue
            reason = ("no translation in tessel" if target not in ATEN else
                      _short(self.refused.get(n.name, "not worth a kernel of its own")))
            why.setdefault(reason, Counter())[target] += 1
        if why:
            parts = [", ".join(f"{t} x{c}" if c > 1 else t for t, c in sorted(ops.items()))
                     + f" ({reason})" for reason, ops in why.items()]
            count = sum(sum(ops.values()) for ops in why.values())
            _say(f"graph {self.name}: {count} operator(s) run in PyTorch: {'; '.join(parts)}")
        for piece in failed:
            _say(f"graph {self.name}: piece {piece} runs in PyTorch")


LAYOUT_ONLY = {"getitem", "aten.view.default", "aten.reshape.default",
               "aten._unsafe_view.default", "aten.flatten.using_ints", "aten.squeeze.dim",
               "aten.unsqueeze.default", "aten.contiguous.default", "aten.clone.default",
               "aten.alias.default", "aten.detach.default", "aten.dropout.default"}


class _Refused(Exception):
    def __init__(self, nodes: set[str], why: str) -> None:
        super().__init__(why)
        self.nodes = nodes


def compile_pieces(graphs: dict[str, Graph], options: BackendOptions
                   ) -> dict[str, CompiledModel | TesselError]:
    """Each piece compiled (after tuning them with `options.tune` trials in all); a piece that
    does not compile maps to its error (it runs in PyTorch)."""
    target = options.target
    graphs = {name: load_model(g) for name, g in graphs.items()}
    if options.tune and graphs:
        tune_pieces(list(graphs.values()), target, options)
    db = Database(options.database) if options.database is not None else None
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
    each piece's kernels in its sequence (tessel.graph.select)."""
    layout = options.layout if options.layout != "auto" else DEFAULT_LAYOUT
    kernels = [k for graph in graphs for k in model_tasks(graph, target, layout)[0]]
    tasks = extract_tasks(kernels, target)  # one task per distinct kernel of all the pieces
    if not tasks:
        return
    results = tune_tasks(tasks, options.tune, database=options.database)
    if not any(r.interrupted for r in results):
        for graph in graphs:
            select_in_sequence(graph, target, options.database, layout=layout)


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
        tensors = tuple(torch.from_numpy(a).reshape(shape).to(dtype)
                        for a, shape, dtype in zip(outs, self.shapes, self.dtypes))
        return tensors if self.several else tensors[0]


# ---- helpers ----

def _is_weight(node: Any) -> bool:
    """Whether a Dynamo placeholder is a module's parameter or buffer."""
    arg = node.meta.get("grapharg")
    return arg is not None and is_from_unspecialized_param_buffer_source(arg.source)


def _symbolic(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape)


def _refuse_gradients(args: Sequence[Any]) -> None:
    if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                       for a in args):
        raise GraphError("torch.compile backend tessel computes inference only, and gradients "
                         "are enabled for tensors that require them: call the model under "
                         "torch.no_grad() or torch.inference_mode()")


def _version(t: Any) -> int:
    try:
        return t._version
    except RuntimeError:  # an inference tensor has no version counter (cannot change)
        return 0


def _as_numpy(t: Any) -> Any:
    t = t.detach()
    return (t if t.is_contiguous() else t.contiguous()).numpy()


def _name(gm: Any) -> str:
    """Dynamo's id of the graph ("0_1": frame 0, its second compilation), as an identifier."""
    cid = getattr(gm, "meta", {}).get("dynamo_compile_id")
    return (f"dynamo{cid.frame_id}_{cid.frame_compile_id}"
            if hasattr(cid, "frame_id") else type(gm).__name__)


def _short(reason: str) -> str:
    """A converter's refusal without the node it names (the line names the operator)."""
    return reason.split("): ", 1)[-1] if reason.startswith("node ") else reason


_SAID: dict = {}  # the warnings registry of _say: each message once per process


def _say(message: str) -> None:
    """Warn once, in one line that names the backend (no source line beneath)."""
    warnings.warn_explicit(message, TorchFallbackWarning, "torch.compile(backend='tessel')", 0,
                           module="tessel.graph.torch_backend", registry=_SAID)


__all__ = ["tessel_backend", "BackendOptions", "TesselGraph", "TorchFallbackWarning"]
