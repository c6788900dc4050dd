"""PrimFunc <-> JSON, names included, so stored workloads can be rebuilt exactly.

Variables and buffers are written once in tables and referred to by index, which keeps
their identity (the same loop variable used in many places is one Var after loading).
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

from tessel.ir import buffer as _buffer
from tessel.ir import expr as _expr
from tessel.ir import stmt as _stmt
from tessel.ir.buffer import Buffer
from tessel.ir.expr import IRError, Var
from tessel.ir.stmt import PrimFunc

FORMAT = "tessel.primfunc/1"
_CLASSES = {cls.__name__: cls for mod in (_expr, _buffer, _stmt) for cls in vars(mod).values()
            if isinstance(cls, type) and dataclasses.is_dataclass(cls)
            and cls not in (Var, Buffer, PrimFunc)}


class _Writer:
    def __init__(self) -> None:
        self.vars: dict[int, int] = {}
        self.var_table: list[list[str]] = []
        self.buffers: dict[int, int] = {}
        self.buffer_table: list[list[Any]] = []

    def value(self, x: Any) -> Any:
        if isinstance(x, Var):
            if id(x) not in self.vars:
                self.vars[id(x)] = len(self.var_table)
                self.var_table.append([x.name, x.dtype])
            return {"v": self.vars[id(x)]}
        if isinstance(x, Buffer):
            if id(x) not in self.buffers:
                self.buffers[id(x)] = len(self.buffer_table)
                self.buffer_table.append([x.name, list(x.shape), x.dtype, x.scope])
            return {"b": self.buffers[id(x)]}
        if dataclasses.is_dataclass(x):
            fields = [self.value(getattr(x, f.name)) for f in dataclasses.fields(x)]
            return {"t": type(x).__name__, "f": fields}
        if isinstance(x, tuple):
            return [self.value(v) for v in x]
        if isinstance(x, dict):
            return {"d": {k: self.value(v) for k, v in x.items()}}
        return x


class _Reader:
    def __init__(self, doc: dict[str, Any]) -> None:
        self.vars = [Var(name, dtype) for name, dtype in doc["vars"]]
        self.buffers = [Buffer(n, tuple(s), d, sc) for n, s, d, sc in doc["buffers"]]

    def value(self, x: Any) -> Any:
        if isinstance(x, list):
            return tuple(self.value(v) for v in x)
        if not isinstance(x, dict):
            return x
        if "v" in x:
            return self.vars[x["v"]]
        if "b" in x:
            return self.buffers[x["b"]]
        if "d" in x:
            return {k: self.value(v) for k, v in x["d"].items()}
        cls = _CLASSES.get(x.get("t"))
        if cls is None:
            raise IRError(f"serialized program has an unknown node kind {x.get('t')!r}")
        return cls(*(self.value(v) for v in x["f"]))


def to_json(func: PrimFunc) -> str:
    w = _Writer()
    params = [w.value(p) for p in func.params]
    body = w.value(func.body)
    doc = {"format": FORMAT, "name": func.name, "params": params, "body": body,
           "vars": w.var_table, "buffers": w.buffer_table, "attrs": func.attrs}
    return json.dumps(doc, separators=(",", ":"), default=repr)


def from_json(text: str) -> PrimFunc:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise IRError(f"not a serialized program: {err}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise IRError(f"not a serialized program (expected format {FORMAT!r})")
    r = _Reader(doc)
    return PrimFunc(doc["name"], tuple(r.value(p) for p in doc["params"]),
                    r.value(doc["body"]), doc.get("attrs", {}))
