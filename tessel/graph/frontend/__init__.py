"""Where graphs come from: ONNX models (onnx_import, with onnx_file, onnx_fold and
onnx_convert_*), torch modules through torch.export (torch_import, with torch_context and the
torch_convert_* tables), both building through context.GraphBuilder, and the built-in zoo
(models). Each front end needs its extra (onnx, torch) and is imported on use."""
