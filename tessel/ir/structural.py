"""Structural equality and hashing that ignore names.

Two programs are structurally equal when they differ only in the names of variables,
buffers, blocks and the function: variables and buffers are numbered in order of first
appearance. The hash of a PrimFunc is a workload's identity (with the target).
"""
from __future__ import annotations

import hashlib
from typing import Any

from tessel.ir.buffer import Buffer
from tessel.ir.expr import FloatImm, IntImm, Var
from tessel.ir.stmt import Block, PrimFunc
from tessel.ir.visitor import _fields, NODE_TYPES


class _Encoder:
    def __init__(self) -> None:
        self.vars: dict[int, int] = {}
        self.buffers: dict[int, int] = {}

    def var(self, v: Var) -> tuple:
        if id(v) not in self.vars:
            self.vars[id(v)] = len(self.vars)
        return ("var", self.vars[id(v)], v.dtype)

    def buffer(self, b: Buffer) -> tuple:
        if id(b) not in self.buffers:
            self.buffers[id(b)] = len(self.buffers)
            return ("buf", self.buffers[id(b)], b.shape, b.dtype, b.scope)
        return ("buf", self.buffers[id(b)])

    def value(self, x: Any) -> Any:
        if isinstance(x, NODE_TYPES):
            return self.node(x)
        if isinstance(x, tuple):
            return tuple(self.value(v) for v in x)
        if isinstance(x, dict):
            return tuple(sorted((k, repr(v)) for k, v in x.items()))
        return x

    def node(self, n: Any) -> tuple:
        if isinstance(n, Var):
            return self.var(n)
        if isinstance(n, Buffer):
            return self.buffer(n)
        if isinstance(n, (IntImm, FloatImm)):
            return (type(n).__name__, n.value, n.dtype)
        skip = "name" if isinstance(n, Block) else None
        return (type(n).__name__,) + tuple(
            self.value(getattr(n, f)) for f in _fields(type(n)) if f != skip)

    def func(self, f: PrimFunc) -> tuple:
        key = ("PrimFunc", tuple(self.buffer(p) for p in f.params), self.node(f.body))
        # the attributes that are part of the identity (PrimFunc): absent, keys are unchanged
        if f.constant_params:
            key += (("constant_params", f.constant_params),)
        if f.partition:
            key += (("partition", f.partition),)
        return key + (("measure", f.measure),) if f.measure != "warm" else key


def structural_key(node: Any) -> tuple:
    """A name-free canonical form: equal keys mean structurally equal programs."""
    enc = _Encoder()
    return enc.func(node) if isinstance(node, PrimFunc) else enc.node(node)


def structural_equal(a: Any, b: Any) -> bool:
    return structural_key(a) == structural_key(b)


def structural_hash(node: Any) -> str:
    """sha256 (hex) of the canonical form; stable across processes and sessions."""
    return hashlib.sha256(repr(structural_key(node)).encode()).hexdigest()
