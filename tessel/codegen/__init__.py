"""Code generation: loop IR -> C source, and the compiler driver that builds it."""
