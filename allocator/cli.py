"""Command-line door: ``python -m allocator clear BOOK.json`` and ``python -m allocator check BOOK.json RESULT.json``.

Exit codes: 0 fine, 1 invariant violations (each printed), 2 malformed input (``error: FIELD: message``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from allocator.book import Book
from allocator.errors import BookError
from allocator.invariants import check
from allocator.reference import clear
from allocator.result_json import result_from_json


def _load(path: str, what: str) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except OSError as exc:
        raise BookError(what, f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise BookError(
            what, f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def _book(path: str) -> Book:
    data = _load(path, "book")
    try:
        return Book.from_json(data)
    except BookError:
        raise
    except (
        TypeError,
        ValueError,
        KeyError,
        IndexError,
        OverflowError,
    ) as exc:  # a shape the parser did not foresee
        raise BookError("book", f"malformed ({type(exc).__name__}: {exc})") from None


def cmd_clear(args: argparse.Namespace) -> int:
    book = _book(args.book)
    json.dump(
        clear(book).to_json(),
        sys.stdout,
        separators=(",", ":") if args.compact else None,
        indent=None if args.compact else 1,
    )
    sys.stdout.write("\n")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    book = _book(args.book)
    result = result_from_json(_load(args.result, "result"), book)
    violations = check(book, result)
    for v in violations:
        print(f"violation: {v}")
    if not violations:
        print(f"ok: {len(result.winners)} winners, {len(result.losers)} losers, every invariant holds")
    return 1 if violations else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m allocator", description="Clear an order book, or check a result."
    )
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("clear", help="clear BOOK.json and write the result as JSON to stdout")
    c.add_argument("book")
    c.add_argument("--compact", action="store_true", help="no indentation (large books)")
    c.set_defaults(run=cmd_clear)
    k = sub.add_parser("check", help="verify every invariant of RESULT.json against BOOK.json")
    k.add_argument("book")
    k.add_argument("result")
    k.set_defaults(run=cmd_check)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except BookError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return code
