"""A member types a job into the submit form and sees, per GPU type, how fast jobs like it ran there, what
that takes and costs, and the limit that pays the same per unit of work (docs/predictions.md §Speed per GPU
type)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.helpers import login, shot
from tests.conftest import World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_member_sees_speeds_per_gpu_type(world: World, live_server: Any, page: Any, tmp_path: Path) -> None:
    from django.core.cache import cache

    from tests.market.predict_helpers import finished_job

    cache.clear()
    (h100,) = world.nodes(world.h100, 1)
    (a100,) = world.nodes(world.a100, 1, prefix="a")
    world.fund(world.alpha, 500)
    # The team's fine-tuning job ran about 4 h on A100s and about 1.6 h on H100s (2.5x as fast).
    for i in range(12):
        a100_s = 14400 + 300 * (i // 2 % 5)
        node, runtime = (a100, a100_s) if i % 2 else (h100, a100_s / 2.5)
        finished_job(
            world.alpha, world.amy, node, runtime_s=runtime, name=f"finetune-llama-{i}",
            command="python finetune.py --lr 3e-5", gpus=2, ended_ago_s=3600 * (i + 1),
        )  # fmt: skip

    login(page, live_server.url, "amy")
    page.goto(f"{live_server.url}/t/alpha/jobs/new/")
    page.fill("#id_name", "finetune-llama-13")
    page.fill("#id_command", "python finetune.py --lr 1e-5")
    page.fill("#id_gpus", "2")
    page.select_option("#bids-0-gpu_type", "A100")
    page.fill("#bids-0-limit", "1.6")
    page.wait_for_selector(
        "#prediction table[data-field=speeds] tr[data-type=H100] td[data-field=limit]:has-text('4.00')"
    )
    box = page.locator("#prediction")
    assert "Per GPU type (speeds against A100)" in box.inner_text()
    # The cost line prices the A100 at its own pace, not at the runtime pooled over both types (2.9 h).
    assert "at A100's speed it runs about 4.1 h) that is about 9.90 credits for 2 GPUs" in box.inner_text()
    h = page.locator("#prediction tr[data-type=H100]")
    assert h.locator("td[data-field=speed]").inner_text() == "2.50x"
    assert h.locator("td[data-field=runtime]").inner_text() == "1.6 h"
    assert h.locator("td[data-field=basis]").inner_text().startswith("6 runs here, 6 on A100;")
    a = page.locator("#prediction tr[data-type=A100]")
    assert a.locator("td[data-field=speed]").inner_text() == "1.00x"
    assert a.locator("td[data-field=runtime]").inner_text() == "4.1 h"
    assert a.locator("td[data-field=basis]").inner_text() == "reference"
    # The full sentence is the row's tooltip.
    assert "bid 4.00" in (h.get_attribute("title") or "")
    shot(page, tmp_path, "submit-speeds", docs=True)

    # A job nothing resembles on the other type: the cold start is said, not guessed.
    page.fill("#id_name", "brand-new-thing")
    page.fill("#id_command", "./new.sh")
    page.fill("#id_gpus", "3")
    page.wait_for_selector("#prediction tr[data-type=H100] td[data-field=basis]:has-text('cold start')")
