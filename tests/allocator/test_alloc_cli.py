"""The command-line door and the book's validation: field-named errors, exit codes, no tracebacks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from allocator import MICRO, Bids, Book, BookError, clear, hold_of
from allocator.cli import main

ROOT = Path(__file__).resolve().parents[2]


def small_book() -> dict[str, Any]:
    return {
        "now": 10_000,
        "round": 1,
        "gpu_types": [{"name": "h100", "reserve": MICRO, "posted": 2 * MICRO}],
        "nodes": [{"name": "n0", "gpu_type": "h100", "capacity": 8}],
        "tenants": [
            {"name": "a", "balance": 100 * MICRO},
            {"name": "b", "balance": 100 * MICRO, "weight": 2},
        ],
        "bids": [
            {
                "job": i,
                "tenant": "ab"[i % 2],
                "gpus": 1 + i % 3,
                "limits": {"h100": 3 * MICRO},
                "max_hours": 1,
            }
            for i in range(6)
        ],
    }


def write(tmp_path: Path, name: str, data: Any) -> str:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return str(path)


def test_clear_then_check_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    book = write(tmp_path, "book.json", small_book())
    assert main(["clear", book]) == 0
    result = write(tmp_path, "result.json", capsys.readouterr().out)
    assert main(["check", book, result]) == 0
    assert "every invariant holds" in capsys.readouterr().out


def test_check_names_each_violation(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    book = write(tmp_path, "book.json", small_book())
    main(["clear", book])
    doc = json.loads(capsys.readouterr().out)
    doc["winners"][0]["price"] = 99 * MICRO
    doc["winners"][1]["gpus"] = doc["winners"][0]["gpus"]
    assert main(["check", book, write(tmp_path, "bad.json", doc)]) == 1
    out = capsys.readouterr().out
    assert "more than its bid" in out and "bound twice" in out and "digest mismatch" in out


@pytest.mark.parametrize(
    ("mutate", "want"),
    [
        (lambda b: b["bids"][3].update(gpus=0), "bids[3].gpus: must be a positive integer"),
        (lambda b: b["bids"][2].update(gpus="two"), "bids[2].gpus: must be a positive integer"),
        (lambda b: b["bids"][1].update(tenant="zed"), "bids[1].tenant: must name a known tenant"),
        (lambda b: b["bids"][0].pop("limits"), "bids[0].limits: is required"),
        (
            lambda b: b["bids"][0].update(limits={"h100": -5}),
            "bids[0].limits.h100: must be a non-negative integer",
        ),
        (lambda b: b["tenants"][1].update(weight=0), "tenants[1].weight: must be a positive number"),
        (lambda b: b["nodes"][0].update(capacity=-1), "nodes[0].capacity: must be a positive integer"),
        (lambda b: b["nodes"][0].update(free=[9]), "nodes[0].free: slot index beyond capacity"),
        (lambda b: b["gpu_types"][0].update(posted=1), "gpu_types[0].posted: must be an integer >= reserve"),
        (
            lambda b: b.update(policy={"starve_rounds": -1}),
            "policy.starve_rounds: must be a non-negative integer",
        ),
        (lambda b: b["bids"][4].update(job=0), "bids[4].job: duplicate job id"),
        (lambda b: b.pop("nodes"), "book.nodes: is required"),
    ],
)
def test_malformed_books_name_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Any, want: str
) -> None:
    data = small_book()
    mutate(data)
    assert main(["clear", write(tmp_path, "book.json", data)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {want}"


def test_not_json_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clear", write(tmp_path, "book.json", "{nope")]) == 2
    assert capsys.readouterr().err.startswith("error: book: ")
    assert main(["clear", str(tmp_path / "missing.json")]) == 2


def test_module_entry_point_exits_2_without_traceback(tmp_path: Path) -> None:
    data = small_book()
    data["bids"][3]["gpus"] = 0
    run = subprocess.run(
        [sys.executable, "-m", "allocator", "clear", write(tmp_path, "b.json", data)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert run.returncode == 2
    assert run.stderr == "error: bids[3].gpus: must be a positive integer\n"


def test_columnar_bids_and_round_trip() -> None:
    book = Book.from_json(small_book())
    again = Book.from_json(json.loads(json.dumps(book.to_json())))
    assert again.bids.limit.tolist() == book.bids.limit.tolist()
    assert again.tenants.held.tolist() == book.tenants.held.tolist()


def test_bids_from_rows_and_direct_construction_errors() -> None:
    bids = Bids.from_rows(
        [{"job": 1, "tenant": "a", "gpus": 2, "limits": {"h100": 5}, "max_hours": 2}], ["h100"], ["a"]
    )
    assert bids.max_s.tolist() == [7200] and bids.limit.tolist() == [[5]]
    with pytest.raises(BookError) as err:
        Bids(
            np.array([1, 2]),
            np.array([0, 0], dtype=np.int32),
            np.array([1, 0], dtype=np.int32),
            np.array([[5], [5]]),
            np.array([60, 60]),
            np.array([0, 0]),
            np.array([0, 0], dtype=np.int32),
        )
    assert err.value.field == "bids[1].gpus"


def test_hold_is_integer_ceiling() -> None:
    assert int(hold_of(2, 3 * MICRO, 1800)) == 3 * MICRO
    assert int(hold_of(1, 1, 1)) == 1  # 1/3600 of a micro-credit rounds up


@pytest.mark.parametrize(
    "mutate",
    [
        lambda b: b["tenants"][0].update(guarantee="lots"),
        lambda b: b["tenants"][0].update(held=[1]),
        lambda b: b["nodes"][0].update(free="all"),
        lambda b: b["bids"].append("not a bid"),
        lambda b: b.update(gpu_types={"h100": 1}),
        lambda b: b["bids"][0].update(limits={"h100": 10**30}),
    ],
)
def test_odd_shapes_are_errors_not_tracebacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mutate: Any
) -> None:
    data = small_book()
    mutate(data)
    assert main(["clear", write(tmp_path, "book.json", data)]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_the_worked_example_of_the_docs_holds() -> None:
    """docs/allocator.md's worked example: its book clears to the result shown there, digest included (the
    digest pins the canonical serialisation: a change to it must update the docs)."""
    text = (ROOT / "docs" / "allocator.md").read_text()
    book_doc = json.loads(text.split("`BOOK.json`:\n\n```json\n", 1)[1].split("```", 1)[0])
    shown = json.loads(text.split("(abridged layout):\n\n```json\n", 1)[1].split("```", 1)[0])
    assert clear(Book.from_json(book_doc)).to_json() == shown
