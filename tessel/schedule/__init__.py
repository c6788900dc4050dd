"""The schedule language: primitives, sampling instructions and traces."""
from tessel.schedule.schedule import Schedule
from tessel.schedule.trace import (BlockRV, Instruction, IntRV, LoopRV, ScheduleError, Trace,
                                   is_sampling)

__all__ = ["Schedule", "Trace", "Instruction", "ScheduleError", "BlockRV", "LoopRV", "IntRV",
           "is_sampling"]
