"""One definition per graph operator (see base.py), grouped by family; importing this package
registers them all in `OPS`."""
from tessel.graph.opdefs import (activation, blocked, elementwise, logic, nn,  # noqa: F401
                                 norm, pool_indices, reduce, resize, shape,
                                 winograd)  # (registration)
from tessel.graph.opdefs.base import (OPS, REQUIRED, Example, OpDef, broadcast_shape, define,
                                      infer_type)

__all__ = ["OPS", "OpDef", "Example", "REQUIRED", "define", "infer_type", "broadcast_shape"]
