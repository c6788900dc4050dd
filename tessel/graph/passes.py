"""The graph passes every model goes through between its importer and fusion (simplify):
constants folded (tessel.graph.fold), batch norms folded into their convolutions, exporters'
spellings of one operator recognized (tessel.graph.spellings)."""
from __future__ import annotations

from tessel.graph.fold import fold_batch_norm, fold_constants
from tessel.graph.ir import Graph
from tessel.graph.spellings import (pads_into_convs, recognize_activations,
                                    rows_before_unit_axis, scale_after_products,
                                    unflatten_products)


def simplify(graph: Graph) -> Graph:
    """Fold constants, fold batch norms, fold again, recognize exporters' spelled-out GELU
    and SiLU, give products flattened to rows their own leading axes back (and those whose
    rows sit before a unit axis their rows), scale attention's scores after their product,
    and fold explicit zero padding into the convolutions that read it."""
    graph = fold_constants(fold_batch_norm(fold_constants(graph)))
    graph = rows_before_unit_axis(unflatten_products(recognize_activations(graph)))
    return pads_into_convs(scale_after_products(graph))


__all__ = ["simplify"]
