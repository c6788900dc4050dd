"""The loop-nest IR: expressions, buffers, statements, blocks, PrimFunc, printer, structure."""
from tessel.ir.buffer import SCOPES, Buffer, BufferRegion, Range
from tessel.ir.expr import (DTYPE_BITS, INTRINSICS, BinOp, BufferLoad, Call, Cast, Expr,
                            FloatImm, IntImm, IRError, Not, Select, Var, as_int, binop, call,
                            cast, const, convert, eq, is_float, is_int, is_true, logical_and,
                            logical_not, max_, min_, ne, numpy_dtype, select)
from tessel.ir.printer import expr_str, fresh_name, func_str, stmt_str
from tessel.ir.stmt import (CONSTANT_PARAMS, LOOP_KINDS, MEASURE, PARTITION, REDUCE, SPATIAL,
                            THREAD_TAGS, TRUE, Block, BlockRealize, BufferStore, For, IfThenElse,
                            IterVar, PrimFunc, SeqStmt, Stmt, realize, seq)
from tessel.ir.structural import structural_equal, structural_hash, structural_key
from tessel.ir.visitor import (StmtMutator, binding_vars, blocks, block_realizes, children,
                               collect, collect_stmts, free_vars, read_buffers, replace_buffers,
                               substitute, transform, uses_var, walk, written_buffers)
from tessel.ir.serialize import from_json, to_json
