"""The reader takes exactly the format of shared/traces/README.md and names file and line when it cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from allocator.sim.cli import main
from allocator.sim.errors import InputError
from allocator.sim.jobs import read_jobs
from allocator.sim.scenario import MICRO, read_scenario

from .conftest import Write, one_node_toml

TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
if not TRACES.exists():
    TRACES = Path("/work/shared/traces")

TENANT = """
[[tenants]]
name = "a"
guaranteed = { gpu = 4 }
weight = 2
"""
HEADER = "job_id,submit_s,tenant,gpus,duration_s"


@pytest.mark.parametrize(
    ("name", "jobs", "tenants", "types"),
    [("philly-2017-dec", 8069, 11, 1), ("philly-2017-sep", 5643, 11, 1), ("synthetic-hetero", 4039, 8, 3)],
)
def test_reads_the_shipped_traces(name: str, jobs: int, tenants: int, types: int) -> None:
    scenario = read_scenario(TRACES / f"{name}.toml")
    table = read_jobs(scenario)
    assert (len(table), len(scenario.tenants), len(scenario.types)) == (jobs, tenants, types)
    assert (table.submit_s[1:] >= table.submit_s[:-1]).all()


def test_prices_are_micro_credits_and_default_to_the_reserve() -> None:
    scenario = read_scenario(TRACES / "synthetic-hetero.toml")
    assert scenario.reserve_micro == {"H100": 2 * MICRO, "A100": 1_200_000, "V100": 500_000}
    jobs = read_jobs(scenario)
    first = jobs.ids.index("s000000")  # H100|A100 at 1.85
    assert jobs.prefs[first] == (0, 1)
    assert jobs.price_micro[first].tolist() == [1_850_000, 1_850_000, 0]
    philly = read_scenario(TRACES / "philly-2017-dec.toml")
    assert philly.reserve_micro == {"gpu": MICRO}  # no [pricing]: 1 credit per GPU-hour


def test_no_type_means_any_type_and_no_price_means_each_reserve(write: Write) -> None:
    toml = one_node_toml(TENANT, extra="[pricing]\nreserve = { gpu = 3.0, v = 0.5 }\n")
    toml += '\n[[pools]]\ngpu_type = "v"\nnodes = 1\ngpus_per_node = 4\n'
    scenario = read_scenario(write(toml, f"{HEADER},gpu_type,price\nj1,0,a,1,10,,\nj2,0,a,1,10,,2.5"))
    jobs = read_jobs(scenario)
    assert jobs.prefs == [(0, 1), (0, 1)]
    assert jobs.price_micro.tolist() == [[3 * MICRO, MICRO // 2], [2_500_000, 2_500_000]]


def _error(write: Write, csv: str, toml: str | None = None) -> str:
    scenario_path = write(toml or one_node_toml(TENANT), csv)
    with pytest.raises(InputError) as caught:
        read_jobs(read_scenario(scenario_path))
    return str(caught.value)


def test_unknown_tenant_names_file_and_line(write: Write) -> None:
    message = _error(write, f"{HEADER}\nj1,0,a,1,10\nj2,5,nobody,1,10")
    assert "tiny.jobs.csv:3:" in message and "unknown tenant 'nobody'" in message


def test_negative_gpus_names_file_and_line(write: Write) -> None:
    message = _error(write, f"{HEADER}\nj1,0,a,-2,10")
    assert "tiny.jobs.csv:2:" in message and "'gpus' must be at least 1" in message


def test_missing_column_names_the_header(write: Write) -> None:
    message = _error(write, "job_id,submit_s,tenant,gpus\nj1,0,a,1")
    assert "tiny.jobs.csv:1:" in message and "missing column(s) duration_s" in message


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        ("j1,soon,a,1,10", "'submit_s' must be a whole number"),
        ("j1,0,a,1,-5", "'duration_s' must be at least 0"),
        ("j1,0,a,,10", "'gpus' is empty"),
        ("j1,0,a,1,10\nj1,3,a,1,10", "job_id 'j1' appears twice"),
        ("j1,0,a,1,10,x,y,z", "cells but the header has"),
    ],
)
def test_other_bad_rows(write: Write, row: str, expected: str) -> None:
    assert expected in _error(write, f"{HEADER}\n{row}")


def test_bad_price_is_located(write: Write) -> None:
    message = _error(write, f"{HEADER},price\nj1,0,a,1,10,cheap")
    assert "tiny.jobs.csv:2:" in message and "'price'" in message


def _scenario_error(write: Write, toml: str) -> str:
    with pytest.raises(InputError) as caught:
        read_scenario(write(toml, f"{HEADER}\n"))
    return str(caught.value)


def test_guarantee_of_unknown_type_points_at_the_tenant_table(write: Write) -> None:
    toml = one_node_toml('[[tenants]]\nname = "a"\nguaranteed = { tpu = 1 }\n')
    message = _scenario_error(write, toml)
    line = toml.splitlines().index("[[tenants]]") + 1
    assert f"tiny.toml:{line}:" in message and "'tpu'" in message


def test_scenario_errors(write: Write) -> None:
    assert "not valid TOML" in _scenario_error(write, "name = \n")
    assert "at least one [[tenants]]" in _scenario_error(write, one_node_toml(""))
    over = one_node_toml('[[tenants]]\nname = "a"\nguaranteed = { gpu = 9 }\n')
    assert "sum to 9, above its 8 GPUs" in _scenario_error(write, over)
    negative = one_node_toml('[[tenants]]\nname = "a"\nguaranteed = { gpu = -1 }\n')
    assert "must be at least 0" in _scenario_error(write, negative)
    twice = one_node_toml(TENANT + TENANT)
    assert "defined twice" in _scenario_error(write, twice)


def test_cli_reports_input_errors_without_a_traceback(
    write: Write, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(one_node_toml(TENANT), f"{HEADER}\nj1,0,b,1,10")
    assert main([str(path), "--quiet", "--policy", "static"]) == 2
    assert "tiny.jobs.csv:2: unknown tenant 'b'" in capsys.readouterr().err
