"""Code generation: loop IR -> lowered IR (passes) -> C source, the compiler driver that builds
it, and the ctypes Module that runs it."""
from tessel.codegen.c import CodegenError, generate_c, print_c
from tessel.codegen.compiler import CompileError, asm_for, compile_shared
from tessel.codegen.emulate import EmulationError
from tessel.codegen.build import build
from tessel.codegen.module import ArgumentError, KernelError, Module
from tessel.codegen.passes import lower_kernel

__all__ = ["generate_c", "lower_kernel", "print_c", "CodegenError", "build", "Module",
           "compile_shared", "CompileError", "asm_for", "ArgumentError", "KernelError",
           "EmulationError"]
