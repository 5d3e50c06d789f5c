"""A member types a job into the submit form and sees, as they type, how long jobs like it ran, what it
would cost and when it may start (docs/predictions.md); then the team's manager opts in to holds sized by
prediction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.helpers import login, shot
from tests.conftest import World

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_member_sees_a_prediction_while_typing(
    world: World, live_server: Any, page: Any, tmp_path: Path
) -> None:
    from market.models import JobState, LeaseGpu
    from tests.market.predict_helpers import finished_job, lease_for
    from tests.market.round_helpers import make_job

    (node,) = world.nodes(world.h100, 1)
    world.fund(world.alpha, 500)
    # History: 37 finished runs of the team's fine-tuning job, around two hours each.
    for i in range(37):
        finished_job(
            world.alpha, world.amy, node, runtime_s=6600 + 60 * (i % 11), name=f"finetune-llama-{i}",
            command="python finetune.py --lr 3e-5", gpus=2, ended_ago_s=3600 * (i + 1),
        )  # fmt: skip
    # Another team's 8-GPU pretraining fills the node: its runs took an hour, this one started 20 min ago.
    for i in range(3):
        finished_job(
            world.beta, world.bob, node, runtime_s=3600, name="pretrain", gpus=8, ended_ago_s=9000 + i
        )
    running = make_job(world.beta, world.bob, gpus=8, limits={world.h100: 6}, name="pretrain")
    running.state = JobState.RUNNING
    running.save()
    lease = lease_for(running, node, ran_s=1200)
    LeaseGpu.objects.bulk_create(LeaseGpu(lease=lease, gpu=g) for g in node.gpus.all())
    # A higher bid for 4 GPUs waits ahead.
    make_job(world.gamma, world.carl, gpus=4, limits={world.h100: 6}, name="queued-ahead")

    login(page, live_server.url, "amy")
    page.goto(f"{live_server.url}/t/alpha/jobs/new/")
    box = page.locator("#prediction")
    assert "Type the job's name" in box.inner_text()
    page.type("#id_name", "finetune-llama-38", delay=20)  # typed key by key, as a person would
    page.wait_for_selector("#prediction p[data-field=prediction]:has-text('Jobs like this ran')")
    page.fill("#id_command", "python finetune.py --lr 1e-5")
    page.fill("#id_gpus", "2")
    page.select_option("#bids-0-gpu_type", "H100")
    page.fill("#bids-0-limit", "2.4")
    page.wait_for_selector("#prediction p[data-field=cost]:has-text('your limit of 2.40')")
    text = box.inner_text()
    assert "Jobs like this ran 1.9 h (median of 37 jobs, same team, same job name, same GPU count)" in text
    # The posted price (2.00, borrowed: alpha has no guarantee) x 2 GPUs x ~1.9 h.
    assert "At 2.00 credits per GPU-hour (H100: the posted price" in text
    assert "about 7." in text and "for 2 GPUs" in text
    assert "Estimated start" in text and "1 bid (4 GPUs) ahead of yours" in text
    # The node frees when the running job's predicted hour is up, about 40 minutes from now.
    assert "In about 4" in text and "predicted ends" in text
    assert "Max hours 1 is less than" in text  # the form still says 1 hour: warned before submitting
    shot(page, tmp_path, "submit-prediction", docs=True)
    page.fill("#id_max_hours", "3")
    page.wait_for_selector("#prediction p[data-field=warning]", state="detached")

    # Submitted, the job's page shows the same prediction and where it stands.
    page.click("form button:has-text('Submit job')")
    page.wait_for_selector("h1:has-text('finetune-llama-38')")
    card = page.locator("section[aria-labelledby=estimate-h]")
    assert "Jobs like this ran 1.9 h (median of 37 jobs" in card.inner_text()
    assert "1 bid (4 GPUs) ahead" in card.inner_text()
    shot(page, tmp_path, "job-prediction", docs=True)

    page.goto(f"{live_server.url}/t/alpha/jobs/new/")
    # A name nothing resembles, with a gang size nobody ran: the cold start is said, not guessed.
    page.fill("#id_name", "brand-new-thing")
    page.fill("#id_command", "./new.sh")
    page.fill("#id_gpus", "3")
    page.wait_for_selector("#prediction:has-text('cold start')")

    # Another name, the same program with other arguments: pooled by program, and said so (issue 37 §5).
    page.fill("#id_name", "sweep-7")
    page.fill("#id_command", "python finetune.py --lr 9e-5")
    page.fill("#id_gpus", "2")
    page.wait_for_selector("#prediction:has-text('same program with any arguments')")
    assert "same team, same program with any arguments, same GPU count" in box.inner_text()
    assert "same command" not in box.inner_text()
    shot(page, tmp_path, "submit-prediction-program", docs=True)


def test_manager_opts_in_to_predicted_holds(
    world: World, live_server: Any, page: Any, tmp_path: Path
) -> None:
    from market.models import HoldPolicy

    login(page, live_server.url, "alice")
    page.click("nav >> text=Holds")
    page.check("input[name=sized_by_prediction]")
    page.check("input[name=on_hold_end][value=stop]")
    page.click("main button:has-text('Save')")
    page.wait_for_selector("text=Hold sizing saved")
    policy = HoldPolicy.objects.get(tenant=world.alpha)
    assert policy.sized_by_prediction and policy.on_hold_end == "stop"
    shot(page, tmp_path, "holds-setting", docs=True)
