"""The sandbox every rubric and strategy template renders in: Jinja2's ``ImmutableSandboxedEnvironment`` (no
Python internals, no writes to an input), made to refuse, before they are built, the values that would exhaust a
worker's memory (docs/security.md):

* ``*`` makes at most ``MAX_TEMPLATE_VALUE`` characters or items (counting what a list's items take as text:
  ``[big] * 10**6``), ``**`` at most 1,000 digits;
* ``+``, ``~``, a list, tuple or dict literal, an output, a filter's or a method's result: at most ``MAX_RENDERED``
  characters as text (a value doubled in a loop or a recursive macro stops there);
* a filter, a global (``lipsum``) or a method (``'a'.center(n)``, ``'a'.zfill(n)``) given a number over
  ``MAX_TEMPLATE_VALUE``, a format (``'%999999999s' % x``, ``'{:>999999999}'.format(x)``, ``|format``) with such a
  width or precision (or a ``*`` or nested one), a ``replace`` or ``join`` whose result would be over
  ``MAX_RENDERED``.

What it does not bound is time: nested loops over ``range`` (capped at 100,000 each by Jinja2) still run.
"""

from __future__ import annotations

import functools
import math
import re
import string
from collections.abc import Callable
from typing import Any

import jinja2.runtime
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import generate_lorem_ipsum

MAX_TEMPLATE_VALUE = 1_000_000  # characters or items a template's ``*`` may make, digits its ``**`` may
MAX_RENDERED = 50_000_000  # characters any value or the rendered text may take (inputs may be long dialogues)
MAX_LIPSUM_PARAGRAPHS = 100

_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d*))?")


def text_weight(value: Any, weights: dict[int, int] | None = None) -> int:
    """About how many characters ``value`` takes as text; every object is measured once (shared items count each
    time they occur, as ``str`` would write them) so a value nested by reference costs no more to measure."""
    weights = {} if weights is None else weights
    known = weights.get(id(value))
    if known is not None:
        return known
    if isinstance(value, str):
        weight = len(value)
    elif isinstance(value, list | tuple | set | frozenset):
        weights[id(value)] = 0  # a cycle counts once
        weight = 2 + sum(text_weight(item, weights) + 2 for item in value)
    elif isinstance(value, dict):
        weights[id(value)] = 0
        weight = 2 + sum(text_weight(k, weights) + text_weight(v, weights) + 4 for k, v in value.items())
    elif isinstance(value, int):
        weight = value.bit_length() // 3 + 1
    else:
        weight = 1
    weights[id(value)] = weight
    return weight


def _check_rendered(value: Any, what: str) -> Any:
    if text_weight(value) > MAX_RENDERED:
        raise SecurityError(f"{what} may not make a value over {MAX_RENDERED:,} characters")
    return value


def _check_number(value: Any, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_TEMPLATE_VALUE:
        raise SecurityError(f"{what} may not be given a number over {MAX_TEMPLATE_VALUE:,}")


def _check_percent_format(text: str) -> None:
    for match in _PERCENT_SPEC.finditer(text):
        for part in match.groups():
            if part == "*" or (part and int(part) > MAX_TEMPLATE_VALUE):
                raise SecurityError(f"a format's width or precision may not be '*' or over {MAX_TEMPLATE_VALUE:,}")


def _check_brace_format(text: str) -> None:
    for _, field, spec, _ in string.Formatter().parse(text):
        if field is None or not spec:
            continue
        if "{" in spec or any(int(n) > MAX_TEMPLATE_VALUE for n in re.findall(r"\d+", spec)):
            raise SecurityError(f"a format's width or precision may not be nested or over {MAX_TEMPLATE_VALUE:,}")


def _check_growth(text: Any, old: Any, new: Any, count: Any = None) -> None:
    """``text.replace(old, new)`` would not grow past MAX_RENDERED."""
    if not (isinstance(text, str) and isinstance(new, str)):
        return
    old = str(old)
    times = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        times = min(times, count)
    if len(text) + times * max(len(new) - len(old), 0) > MAX_RENDERED:
        raise SecurityError(f"'replace' may not make a value over {MAX_RENDERED:,} characters")


def _check_join(items: Any, separator: Any) -> None:
    if isinstance(items, list | tuple | set | frozenset):
        total = text_weight(list(items)) + len(str(separator)) * len(items)
        if total > MAX_RENDERED:
            raise SecurityError(f"'join' may not make a value over {MAX_RENDERED:,} characters")


def _sized_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    offset = 1 if getattr(func, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(func)
    def sized(*args: Any, **kwargs: Any) -> Any:
        value, params = (args[offset] if len(args) > offset else None), [*args[offset + 1 :], *kwargs.values()]
        for param in params:
            _check_number(param, f"filter {name!r}")
        if name == "format" and isinstance(value, str):
            _check_percent_format(value)
        elif name == "replace" and len(params) >= 2:
            _check_growth(value, params[0], params[1], params[2] if len(params) > 2 else None)
        elif name == "join":
            value = list(value) if value is not None and not isinstance(value, str) else value
            _check_join(value, params[0] if params else "")
            args = (*args[:offset], value, *args[offset + 1 :])
        elif name == "indent" and isinstance(value, str) and params and isinstance(params[0], str):
            _check_indent(value, params[0])
        return _check_rendered(func(*args, **kwargs), f"filter {name!r}")

    return sized


def _check_indent(value: str, width: str) -> None:
    if len(width) * (value.count("\n") + 1) > MAX_RENDERED:
        raise SecurityError(f"'indent' may not make a value over {MAX_RENDERED:,} characters")


def _lipsum(n: int = 5, html: bool = True, min: int = 20, max: int = 100) -> str:
    if n > MAX_LIPSUM_PARAGRAPHS or max > MAX_LIPSUM_PARAGRAPHS * 10:
        raise SecurityError(f"lipsum may make at most {MAX_LIPSUM_PARAGRAPHS} paragraphs")
    return generate_lorem_ipsum(n, html, min, max)


class _SizedCodeGenerator(CodeGenerator):
    """Checks the size of ``~`` and of list, tuple and dict literals (``[x, x, x, x]`` nested grows 4x a level)
    before anything is made of them as text."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.sized_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")

    def _sized(self, visit: Callable[[Any, Frame], None], node: Any, frame: Frame) -> None:
        if getattr(node, "ctx", "load") != "load":
            visit(node, frame)
            return
        self.write("environment.sized_literal(")
        visit(node, frame)
        self.write(")")

    def visit_Tuple(self, node: nodes.Tuple, frame: Frame) -> None:
        self._sized(super().visit_Tuple, node, frame)

    def visit_List(self, node: nodes.List, frame: Frame) -> None:
        self._sized(super().visit_List, node, frame)

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self._sized(super().visit_Dict, node, frame)


class RubricSandbox(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox, which also refuses values that would exhaust a worker's memory (module doc)."""

    code_generator_class = _SizedCodeGenerator
    intercepted_binops = frozenset({"*", "**", "+", "%"})

    def __init__(self, **options: Any) -> None:
        super().__init__(finalize=functools.partial(_check_rendered, what="an output"), **options)
        self.filters = {name: _sized_filter(name, func) for name, func in self.filters.items()}
        self.globals["lipsum"] = _lipsum

    @staticmethod
    def concat(parts: Any) -> str:
        total, kept = 0, []
        for part in parts:
            total += len(part)
            if total > MAX_RENDERED:
                raise SecurityError(f"a template may not render over {MAX_RENDERED:,} characters")
            kept.append(part)
        return "".join(kept)

    @staticmethod
    def sized_concat(parts: tuple[Any, ...]) -> str:
        weights: dict[int, int] = {}
        if sum(text_weight(part, weights) for part in parts) > MAX_RENDERED:
            raise SecurityError(f"'~' may not make a value over {MAX_RENDERED:,} characters")
        return jinja2.runtime.str_join(parts)

    @staticmethod
    def sized_literal(value: Any) -> Any:
        return _check_rendered(value, "a literal")

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | list | tuple) and isinstance(times, int):
                    weights: dict[int, int] = {}
                    items = 0 if isinstance(seq, str) else sum(text_weight(item, weights) for item in seq)
                    if max(len(seq), items) * times > MAX_TEMPLATE_VALUE:
                        raise SecurityError(f"a template may not make a value over {MAX_TEMPLATE_VALUE:,} long")
        sequences = isinstance(left, str | list | tuple) and isinstance(right, str | list | tuple)
        if operator == "+" and sequences and text_weight(left) + text_weight(right) > MAX_RENDERED:
            raise SecurityError(f"'+' may not make a value over {MAX_RENDERED:,} characters")
        if operator == "%" and isinstance(left, str):
            _check_percent_format(left)
        powers = operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1
        if powers and right * math.log10(abs(left)) > 1000:
            raise SecurityError("a template may not make a number over 1,000 digits")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        for param in (*args, *kwargs.values()):
            _check_number(param, "a call")
        method = getattr(__obj, "__wrapped__", __obj)  # str.format comes wrapped by the sandbox
        owner, name = getattr(method, "__self__", None), getattr(method, "__name__", "")
        if isinstance(owner, str) and name in ("format", "format_map"):
            _check_brace_format(owner)
        if isinstance(owner, str) and name == "replace" and len(args) >= 2:
            _check_growth(owner, args[0], args[1], args[2] if len(args) > 2 else None)
        if isinstance(owner, str) and name == "join" and args:
            items = list(args[0]) if not isinstance(args[0], str) else args[0]
            _check_join(items, owner)
            args = (items, *args[1:])
        return _check_rendered(super().call(__context, __obj, *args, **kwargs), "a call")
