"""The TorchDynamo backend itself: one TesselGraph per Dynamo graph, compiled per input
signature (shapes, dtypes, weights' versions) and kept for the last KEEP_SHAPES of them."""
from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Sequence

from tessel.extras import require
from tessel.graph.frontend.torch_import import functional
from tessel.graph.ir import GraphError, check
from tessel.graph.torch_backend.options import BackendOptions, say
from tessel.graph.torch_backend.split import Split

torch = require("torch", "the torch.compile backend")
from torch._dynamo.source import is_from_unspecialized_param_buffer_source  # noqa: E402

KEEP_SHAPES = 8  # compiled programs kept per dynamic graph (least recently used dropped)


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
            say(f"graph {_name(gm)} has dynamic shapes; tessel compiles it for each "
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
            say(f"torch.export could not trace graph {_name(self.gm)} ({_first_line(e)}); it "
                f"runs in PyTorch")
            return self.gm.forward
        try:
            program = functional(program)  # (a write into a slice: slice_scatter)
            return Split(program, args, self.constant, _name(self.gm)).build(self.options)
        except Exception as e:  # noqa: BLE001  eager runs it: so must torch.compile
            if self.options.strict:
                raise
            say(f"tessel could not compile graph {_name(self.gm)} ({_first_line(e)}); it runs "
                f"in PyTorch")
            return self.gm.forward


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


def _first_line(e: Exception) -> str:
    """'KeyError: the first line of its message' (an empty message too)."""
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"


def _name(gm: Any) -> str:
    """Dynamo's id of the graph ("0_1": frame 0, its second compilation), as an identifier."""
    cid = getattr(gm, "meta", {}).get("dynamo_compile_id")
    return (f"dynamo{cid.frame_id}_{cid.frame_compile_id}"
            if hasattr(cid, "frame_id") else type(gm).__name__)


__all__ = ["KEEP_SHAPES", "TesselGraph", "tessel_backend"]
