"""The schedule language: primitives, sampling instructions and traces."""
from tessel.schedule.sampling import fit_tile, transplant
from tessel.schedule.schedule import Schedule
from tessel.schedule.trace import (INSTRUCTIONS, BlockRV, Instruction, InstructionKind, IntRV,
                                   LoopRV, ScheduleError, Trace, is_sampling)

__all__ = ["Schedule", "Trace", "Instruction", "InstructionKind", "INSTRUCTIONS",
           "ScheduleError", "BlockRV", "LoopRV", "IntRV", "is_sampling", "fit_tile",
           "transplant"]
