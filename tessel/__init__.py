"""tessel: search for fast loop-nest implementations of tensor operators."""
