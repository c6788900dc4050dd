"""A readable, TVMScript-like rendering of IR programs.

Names that clash (two loop variables called `i`) are printed with numeric suffixes, so the
text always shows which variable is which.
"""
from __future__ import annotations

import math
from typing import Any, Callable

from tessel.ir.buffer import Buffer, BufferRegion
from tessel.ir.expr import (BinOp, BufferLoad, Call, Cast, Expr, FloatImm, IntImm, Not,
                            Select, Var, is_true)
from tessel.ir.stmt import (REDUCE, Block, BlockRealize, BufferStore, For, IfThenElse,
                            PrimFunc, SeqStmt, Stmt)

# precedence: higher binds tighter
_PREC = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4,
         "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6}
_LOOP_FN = {"serial": "T.serial", "parallel": "T.parallel", "vectorized": "T.vectorized",
            "unrolled": "T.unroll", "thread_binding": "T.thread_binding"}


class Names:
    """Gives each variable and buffer a unique printable name."""

    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.used: set[str] = set()

    def __call__(self, obj: Var | Buffer) -> str:
        key = id(obj)
        if key not in self.names:
            self.names[key] = fresh_name(obj.name or "v", self.used)
        return self.names[key]


def fresh_name(base: str, used: set[str]) -> str:
    """`base`, or `base_1`, `base_2`, ...: the first name not in `used` (added to it)."""
    name, k = base, 0
    while name in used:
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return name


def _float_str(value: float, dtype: str) -> str:
    if math.isinf(value) or math.isnan(value):
        return f'T.{dtype}("{value}")'
    text = repr(float(value))
    return text if dtype == "float32" else f"T.{dtype}({text})"


def expr_str(e: Expr, names: Names | None = None, prec: int = 0,
             other: Callable[[Expr], str] | None = None) -> str:
    """`e` as TVMScript-like text; `other` prints node kinds this module does not know (the
    lowered IR's vector nodes), wherever they appear."""
    names = names or Names()

    def sub(x: Expr, p: int = 0) -> str:
        return expr_str(x, names, p, other)

    if isinstance(e, Var):
        return names(e)
    if isinstance(e, IntImm):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        return str(e.value) if e.dtype == "int32" else f"T.{e.dtype}({e.value})"
    if isinstance(e, FloatImm):
        return _float_str(e.value, e.dtype)
    if isinstance(e, BinOp):
        if e.op in ("min", "max"):
            return f"T.{e.op}({sub(e.a)}, {sub(e.b)})"
        p = _PREC[e.op]
        text = f"{sub(e.a, p)} {e.op} {sub(e.b, p + 1)}"
        return f"({text})" if p < prec else text
    if isinstance(e, Not):
        return f"not {sub(e.a, 3)}" if prec <= 3 else f"(not {sub(e.a, 3)})"
    if isinstance(e, Select):
        return f"T.if_then_else({', '.join(map(sub, (e.cond, e.true_value, e.false_value)))})"
    if isinstance(e, Cast):
        return f'T.Cast("{e.dtype}", {sub(e.value)})'
    if isinstance(e, Call):
        return f"T.{e.name}({', '.join(map(sub, e.args))})"
    if isinstance(e, BufferLoad):
        return f"{names(e.buffer)}[{', '.join(map(sub, e.indices))}]"
    if other is not None:
        return other(e)
    raise TypeError(f"cannot print {type(e).__name__}")


def region_str(r: BufferRegion, names: Names) -> str:
    parts = []
    for rng in r.region:
        lo = expr_str(rng.min, names)
        if isinstance(rng.extent, IntImm) and rng.extent.value == 1:
            parts.append(lo)
        else:
            parts.append(f"{lo}:{expr_str(rng.min + rng.extent, names)}")
    return f"{names(r.buffer)}[{', '.join(parts)}]"


def _buffer_decl(b: Buffer) -> str:
    scope = "" if b.scope == "global" else f', scope="{b.scope}"'
    return f'T.Buffer({b.shape}, "{b.dtype}"{scope})'


class StmtPrinter:
    """Indented TVMScript-like text of statements; subclasses add node kinds (the lowered IR's
    printer in tessel.codegen.lowered)."""

    def __init__(self) -> None:
        self.names = Names()
        self.lines: list[str] = []

    def emit(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def e(self, x: Expr) -> str:
        return expr_str(x, self.names)

    def stmt(self, s: Stmt, d: int) -> None:
        if isinstance(s, SeqStmt):
            for x in s.seq:
                self.stmt(x, d)
        elif isinstance(s, For):
            self.loop(s, d)
        elif isinstance(s, BlockRealize):
            self.block(s, d)
        elif isinstance(s, BufferStore):
            idx = ", ".join(self.e(i) for i in s.indices)
            self.emit(d, f"{self.names(s.buffer)}[{idx}] = {self.e(s.value)}")
        elif isinstance(s, IfThenElse):
            self.emit(d, f"if {self.e(s.condition)}:")
            self.stmt(s.then_case, d + 1)
            if s.else_case is not None:
                self.emit(d, "else:")
                self.stmt(s.else_case, d + 1)
        elif isinstance(s, Block):
            self.block_body(s, d)
        else:
            raise TypeError(f"cannot print {type(s).__name__}")

    def loop(self, s: For, d: int) -> None:
        args = [str(s.extent)]
        if s.thread is not None:
            args.append(f'thread="{s.thread}"')
        if s.annotations:
            args.append(f"annotations={s.annotations!r}")
        self.emit(d, f"for {self.names(s.loop_var)} in {_LOOP_FN[s.kind]}({', '.join(args)}):")
        self.stmt(s.body, d + 1)

    def block(self, r: BlockRealize, d: int) -> None:
        self.emit(d, f'with T.block("{r.block.name}"):')
        for iv, value in zip(r.block.iter_vars, r.iter_values):
            kind = "reduce" if iv.kind == REDUCE else "spatial"
            self.emit(d + 1, f"{self.names(iv.var)} = T.axis.{kind}({iv.extent}, {self.e(value)})")
        if not is_true(r.predicate):
            self.emit(d + 1, f"T.where({self.e(r.predicate)})")
        self.block_body(r.block, d + 1)

    def block_body(self, b: Block, d: int) -> None:
        if b.name != "root":
            self.emit(d, f"T.reads({', '.join(region_str(r, self.names) for r in b.reads)})")
            self.emit(d, f"T.writes({', '.join(region_str(r, self.names) for r in b.writes)})")
        if b.annotations:
            self.emit(d, f"T.block_attr({b.annotations!r})")
        for buf in b.alloc_buffers:
            self.emit(d, f"{self.names(buf)} = T.alloc_buffer{_buffer_decl(buf)[8:]}")
        if b.init is not None:
            self.emit(d, "with T.init():")
            self.stmt(b.init, d + 1)
        self.stmt(b.body, d)

    def func(self, f: PrimFunc) -> str:
        params = ", ".join(f"{self.names(p)}: {_buffer_decl(p)}" for p in f.params)
        self.emit(0, "@T.prim_func")
        self.emit(0, f"def {f.name}({params}):")
        self.block_body(f.root, 1)
        return "\n".join(self.lines)


def func_str(f: PrimFunc) -> str:
    return StmtPrinter().func(f)


def stmt_str(s: Any) -> str:
    p = StmtPrinter()
    p.stmt(s, 0)
    return "\n".join(p.lines)
