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
   CapabilityBasedPartitioner over `tessel.graph.frontend.torch_import.ATEN`; a node whose
   converter refuses its arguments is left out and the split redone) and leaves every other
   operator to PyTorch, saying once, in one line, which operators those are;
3. compiles each piece with `tessel.compile_model`: tuned kernels where the database holds
   records, the fallback (expert priors by default) elsewhere; with `tune=N` it first tunes
   the pieces' tasks for N trials in all.

Where eager runs, so does the compiled module: a graph tessel fails to export or compile runs
in PyTorch, said in one line naming the error ("strict" raises it instead).

Options (`torch.compile(..., options={...})`): "database" (a path; default ./tessel.db when
it exists, as the `tessel` command writes it), "fallback" ("prior" or "unscheduled"), "tune"
(trials, default 0), "strict" (raise when a task has no record, or on any failure inside
tessel), "layout" (as compile_model), "target" (default "host").

Guards. Dynamo recompiles when an input's shape, dtype or the grad mode changes. When it hands
over a graph with dynamic shapes (its automatic dynamic shapes, after a second shape, or
`dynamic=True`) the backend compiles once per concrete input shape it meets (the last 8 are
kept). Weights are read at compile time, as onnxruntime reads them: a weight changed in place
(`load_state_dict`, an optimizer step) or replaced is noticed at the next call and the graph
compiled again. tessel computes inference only: compiling while gradients are enabled for a
tensor that requires them raises, naming `torch.no_grad()`.

Tensors cross into tessel without copies where their memory allows (contiguous tensors are
viewed as numpy arrays, outputs are wrapped by torch.from_numpy); the runtime copies inputs
into its planned memory and its outputs out, as on every call of a compiled model.
"""
from tessel.graph.torch_backend.backend import KEEP_SHAPES, TesselGraph, tessel_backend
from tessel.graph.torch_backend.options import BackendOptions, TorchFallbackWarning

__all__ = ["BackendOptions", "KEEP_SHAPES", "TesselGraph", "TorchFallbackWarning",
           "tessel_backend"]
