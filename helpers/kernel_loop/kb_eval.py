"""The internals of ``kb_dims``: the constants of a KernelBench file, evaluated from its AST.

A module-level assignment is a constant when its value is a *pure expression* (numbers, strings, tuples
and lists, arithmetic, indexing, names of earlier constants; never a call), evaluated here with bounds on
the sizes it may build; nothing is imported or run.  ``evaluate`` walks the module body in source order,
forgets a name that any other statement binds, and can pin size constants (and elements ``T_i`` of
literal size tuples) to new values so that derived constants follow; ``Binding`` is one constant's final
value and whether it is literal.  ``kb_dims`` states the rules built on this (sizes, axes, dims, shapes)
and is the public API; this module imports nothing of the package.
"""

from __future__ import annotations

import ast
import operator
from dataclasses import dataclass
from typing import Any

_MAX_SEQ = 4096  # longest tuple/list/str a pure expression may build
_MAX_INT_BITS = 256

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


class _Impure(Exception):
    """The expression is not a pure expression of numbers and earlier constants."""


# --- pure expressions -----------------------------------------------------------------------------
def _check_size(value: Any) -> Any:
    if isinstance(value, (tuple, list, str)) and len(value) > _MAX_SEQ:
        raise _Impure
    if isinstance(value, int) and value.bit_length() > _MAX_INT_BITS:
        raise _Impure
    return value


def _eval(node: ast.AST, env: dict[str, Any]) -> Any:
    """The value of a pure expression over ``env``; _Impure for anything else (calls, attributes, ...)."""
    if isinstance(node, ast.Constant):
        if isinstance(node.value, (int, float, complex, str, bool, type(None))):
            return node.value
        raise _Impure
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise _Impure
    if isinstance(node, (ast.Tuple, ast.List)):
        items: list[Any] = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                inner = _eval(elt.value, env)
                if not isinstance(inner, (tuple, list)):
                    raise _Impure
                items.extend(inner)
            else:
                items.append(_eval(elt, env))
        return _check_size(tuple(items) if isinstance(node, ast.Tuple) else items)
    if isinstance(node, ast.Dict):
        if any(k is None for k in node.keys):
            raise _Impure
        return {_eval(k, env): _eval(v, env) for k, v in zip(node.keys, node.values, strict=True)}
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand, env)
        if not isinstance(v, (int, float, complex)):
            raise _Impure
        return -v if isinstance(node.op, ast.USub) else +v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a, b = _eval(node.left, env), _eval(node.right, env)
        if isinstance(node.op, ast.Pow):
            if not (isinstance(a, (int, float)) and isinstance(b, (int, float))) or abs(b) > 64:
                raise _Impure
            if isinstance(a, int) and abs(a) > 2 ** 32:
                raise _Impure
        if isinstance(node.op, ast.Mult) and (isinstance(a, (tuple, list, str)) or isinstance(b, (tuple, list, str))):
            seq, n = (a, b) if isinstance(a, (tuple, list, str)) else (b, a)
            if not isinstance(n, int) or len(seq) * max(n, 0) > _MAX_SEQ:
                raise _Impure
        try:
            return _check_size(_BINOPS[type(node.op)](a, b))
        except (TypeError, ZeroDivisionError, OverflowError, ValueError):
            raise _Impure from None
    if isinstance(node, ast.Subscript):
        base = _eval(node.value, env)
        if not isinstance(base, (tuple, list, str)):
            raise _Impure
        sl = node.slice
        try:
            if isinstance(sl, ast.Slice):
                parts = [None if p is None else _eval(p, env) for p in (sl.lower, sl.upper, sl.step)]
                return base[slice(*parts)]
            return base[_eval(sl, env)]
        except (TypeError, IndexError, ValueError):
            raise _Impure from None
    raise _Impure


value_of = _eval  # one size expression's value under ``env`` (names bound to numbers and tuples)


def _has_names(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) for n in ast.walk(node))


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_int_seq(v: Any) -> bool:
    return isinstance(v, (tuple, list)) and len(v) > 0 and all(is_int(x) for x in v)


@dataclass
class Binding:
    """The value a module-level constant ends with, and whether its last assignment names no other
    constant (``literal``: ``input_shape = (8192 * 2,)``) or does (derived: ``bias_shape = (n,)``)."""

    value: Any
    literal: bool


def _bound_names(stmt: ast.stmt) -> set[str]:
    """Every name a statement binds at module level (imports, defs, nested assignments, loop targets)."""
    names: set[str] = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in stmt.names}
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _assignments(stmt: ast.stmt) -> list[tuple[str, ast.AST]] | None:
    """(name, value expression) pairs of a plain module-level assignment, None for any other statement.
    ``a = b = 1`` gives both names; ``a, b = 1, 2`` pairs them up; ``x += 1`` becomes ``x = x + 1``."""
    if isinstance(stmt, ast.Assign):
        pairs: list[tuple[str, ast.AST]] = []
        for target in stmt.targets:
            if isinstance(target, ast.Name):
                pairs.append((target.id, stmt.value))
            elif (isinstance(target, (ast.Tuple, ast.List)) and isinstance(stmt.value, (ast.Tuple, ast.List))
                  and all(isinstance(t, ast.Name) for t in target.elts)
                  and not any(isinstance(v, ast.Starred) for v in stmt.value.elts)
                  and len(target.elts) == len(stmt.value.elts)):
                pairs += [(t.id, v) for t, v in zip(target.elts, stmt.value.elts, strict=True)]
            else:
                return None
        return pairs
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [(stmt.target.id, stmt.value)]
    if isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
        return [(stmt.target.id, ast.BinOp(left=ast.Name(id=stmt.target.id, ctx=ast.Load()), op=stmt.op,
                                          right=stmt.value))]
    return None


def evaluate(tree: ast.Module, pins: dict[str, int] | None = None,
              sizes: set[str] | None = None) -> dict[str, Binding]:
    """Every pure module-level constant with its final value, evaluated in source order.

    ``pins`` (dim name -> int) replace, at each assignment, the value of an int size constant of that name
    and element ``i`` of a literal size tuple ``T`` named ``T_i``; ``sizes`` are the names pins may touch
    (the size constants), so an axis constant or a float of the same name is never pinned."""
    pins = pins or {}
    env: dict[str, Any] = {}
    out: dict[str, Binding] = {}
    for stmt in tree.body:
        pairs = _assignments(stmt)
        if pairs is None:
            for name in _bound_names(stmt):
                env.pop(name, None)
                out.pop(name, None)
            continue
        for name, expr in pairs:
            try:
                value = _eval(expr, env)
            except _Impure:
                env.pop(name, None)
                out.pop(name, None)
                continue
            literal = not _has_names(expr)
            if sizes is None or name in sizes:
                if is_int(value) and name in pins:
                    value = pins[name]
                elif is_int_seq(value) and literal:
                    new = [pins.get(f"{name}_{i}", v) for i, v in enumerate(value)]
                    value = tuple(new) if isinstance(value, tuple) else new
            env[name] = value
            out[name] = Binding(value, literal)
    return out
