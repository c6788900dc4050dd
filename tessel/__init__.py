"""tessel: search for fast loop-nest implementations of tensor operators.

    import tessel
    from tessel import te, ops
    func = ops.matmul(1024, 1024, 1024)
    mod = tessel.build(func, tessel.Target("host"))
"""
import logging

from tessel import ir, ops, te
from tessel.errors import TesselError
from tessel.codegen import CodegenError, CompileError, Module, build, generate_c
from tessel.ir import PrimFunc
from tessel.schedule import Schedule, ScheduleError, Trace
from tessel.target import Target, TargetError
from tessel.database import Database, DatabaseError, TuningRecord
from tessel.measure import (DaskRunner, LocalBuilder, LocalRunner, MeasureCandidate,
                            MeasureResult)

logging.getLogger("tessel").addHandler(logging.NullHandler())  # silent unless configured
__version__ = "0.1.0"
__all__ = ["TesselError", "ir", "te", "ops", "build", "Module", "generate_c", "Target", "TargetError",
           "PrimFunc", "CodegenError", "CompileError", "Schedule", "ScheduleError", "Trace"]
__all__ += ["Database", "DatabaseError", "TuningRecord", "LocalBuilder", "LocalRunner",
            "DaskRunner", "MeasureCandidate", "MeasureResult"]
from tessel.tuning import (Task, TaskScheduler, TuneError, TuneResult, apply_best, tune,
                           tune_tasks)
from tessel.graph.compiler import Selection, compile_model, select_in_sequence, tune_model
from tessel.graph.runtime import CompiledModel

__all__ += ["Task", "TaskScheduler", "TuneError", "TuneResult", "apply_best", "tune",
            "tune_tasks", "tune_model", "compile_model", "CompiledModel", "select_in_sequence",
            "Selection"]
