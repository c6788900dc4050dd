"""Where graphs come from: ONNX models (onnx_import, with onnx_file, onnx_fold and
onnx_convert_*), torch modules through torch.export (torch_import, with torch_context and the
torch_convert_* tables), both building through context.GraphBuilder, and the built-in zoo
(models). Each front end needs its extra (onnx, torch) and is imported on use; `onnx_operators`
lists what the ONNX one translates."""


def onnx_operators() -> tuple[list[str], list[str]]:
    """The ONNX operators the importer translates, and those it evaluates only on constants
    (at import); needs the onnx extra (ImportError otherwise)."""
    from tessel.graph.frontend.onnx_fold import FOLD
    from tessel.graph.frontend.onnx_import import CONVERTERS
    return sorted(CONVERTERS), sorted(set(FOLD) - set(CONVERTERS))
