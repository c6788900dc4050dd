"""One definition per graph operator (see base.py), grouped by family; importing this package
registers them all in `OPS`."""
from tessel.graph.opdefs import (blocked, elementwise, nn, reduce, shape,  # noqa: F401
                                 winograd)  # (registration)
from tessel.graph.opdefs.base import (OPS, REQUIRED, Example, OpDef, broadcast_shape, define,
                                      infer_type)

__all__ = ["OPS", "OpDef", "Example", "REQUIRED", "define", "infer_type", "broadcast_shape"]
