"""Code generation: loop IR -> C source, the compiler driver that builds it, and the ctypes
Module that runs it."""
from tessel.codegen.c import CodegenError, generate_c
from tessel.codegen.compiler import CompileError, asm_for, compile_shared
from tessel.codegen.module import Module, build

__all__ = ["generate_c", "CodegenError", "build", "Module", "compile_shared", "CompileError",
           "asm_for"]
