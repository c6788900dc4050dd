"""tessel: search for fast loop-nest implementations of tensor operators.

    import tessel
    from tessel import te, ops
    func = ops.matmul(1024, 1024, 1024)
    mod = tessel.build(func, tessel.Target("host"))

The names below are imported when first used, so that `import tessel.runtime` (an exported
model's loader) needs numpy alone, and `import tessel` costs little until tessel is used.
"""
import importlib
import logging

from tessel.errors import TesselError

logging.getLogger("tessel").addHandler(logging.NullHandler())  # silent unless configured
__version__ = "0.1.0"

# name -> the module that defines it (a submodule itself where the name is the module's)
_LAZY = {
    "ir": "tessel.ir", "ops": "tessel.ops", "te": "tessel.te",
    "CodegenError": "tessel.codegen", "CompileError": "tessel.codegen",
    "Module": "tessel.codegen", "build": "tessel.codegen", "generate_c": "tessel.codegen",
    "PrimFunc": "tessel.ir",
    "Schedule": "tessel.schedule", "ScheduleError": "tessel.schedule", "Trace": "tessel.schedule",
    "Target": "tessel.target", "TargetError": "tessel.target",
    "Database": "tessel.database", "DatabaseError": "tessel.database",
    "TuningRecord": "tessel.database",
    "DaskRunner": "tessel.measure", "LocalBuilder": "tessel.measure",
    "LocalRunner": "tessel.measure", "MeasureCandidate": "tessel.measure",
    "MeasureResult": "tessel.measure",
    "Task": "tessel.tuning", "TaskScheduler": "tessel.tuning", "TuneError": "tessel.tuning",
    "TuneResult": "tessel.tuning", "apply_best": "tessel.tuning", "tune": "tessel.tuning",
    "tune_tasks": "tessel.tuning",
    "Selection": "tessel.graph.compiler", "compile_model": "tessel.graph.compiler",
    "select_in_sequence": "tessel.graph.compiler", "tune_model": "tessel.graph.compiler",
    "CompiledModel": "tessel.graph.runtime",
}
_SUBMODULES = {"ir", "ops", "te"}


def __getattr__(name: str):
    if name in _LAZY:
        module = importlib.import_module(_LAZY[name])
        value = module if name in _SUBMODULES else getattr(module, name)
        globals()[name] = value
        return value
    try:  # tessel.graph, tessel.codegen, ... after a bare `import tessel`
        return importlib.import_module(f"tessel.{name}")
    except ModuleNotFoundError as err:
        if err.name != f"tessel.{name}":
            raise
        raise AttributeError(f"module 'tessel' has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = ["TesselError", *_LAZY]
