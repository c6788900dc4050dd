"""Measurement: build candidates, time them in isolation, report results (never raise).

    builder, runner = LocalBuilder(target), LocalRunner(target)     # or DaskRunner(address, ...)
    results = measure(builder, runner, candidates)                  # one MeasureResult each
"""
from tessel.measure.builder import Artifact, BuildResult, LocalBuilder, build_artifact
from tessel.measure.dask import DaskRunner
from tessel.measure.result import ERROR_KINDS, MeasureCandidate, MeasureResult
from tessel.measure.runner import Builder, LocalRunner, Runner, measure
from tessel.measure.session import RunConfig

__all__ = ["ERROR_KINDS", "MeasureCandidate", "MeasureResult", "Artifact", "BuildResult",
           "LocalBuilder", "build_artifact", "Builder", "Runner", "LocalRunner", "DaskRunner",
           "RunConfig", "measure"]
