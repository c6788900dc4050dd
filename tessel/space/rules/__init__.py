"""MetaSchedule-style schedule rules and the rule space (see base.py).

    default_rules(target)   AutoInline, UnrollCases, AddRFactor, MultiLevelTilingWithIntrin,
                            MultiLevelTiling, ParallelizeVectorizeUnroll, RandomComputeLocation
"""
from tessel.space.rules.base import RuleSpace, ScheduleRule, leaf_blocks
from tessel.space.rules.cases import UnrollCases
from tessel.space.rules.compute_location import RandomComputeLocation
from tessel.space.rules.inline import AutoInline
from tessel.space.rules.parallel import ParallelizeVectorizeUnroll
from tessel.space.rules.rfactor import AddRFactor
from tessel.space.rules.tensorize import MultiLevelTilingWithIntrin
from tessel.space.rules.tiling import MultiLevelTiling
from tessel.target import Target

def default_rules(target: Target) -> list[ScheduleRule]:
    """The CPU rules of MetaSchedule, in its order, with UnrollCases (blocks that ask for it:
    Winograd's transforms) after inlining, and the tiling with the target's tensor intrinsics
    (integer dot products) before the plain one."""
    return [AutoInline(), UnrollCases().for_target(target), AddRFactor(cores=target.cores),
            MultiLevelTilingWithIntrin().for_target(target),
            MultiLevelTiling().for_target(target),
            ParallelizeVectorizeUnroll(cores=target.cores), RandomComputeLocation()]


__all__ = ["RuleSpace", "ScheduleRule", "default_rules", "leaf_blocks", "AutoInline",
           "AddRFactor", "MultiLevelTiling", "MultiLevelTilingWithIntrin",
           "ParallelizeVectorizeUnroll",
           "RandomComputeLocation", "UnrollCases"]
