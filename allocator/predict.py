"""Runtime predictions from the history of similar finished jobs (docs/predictions.md).

Pure and Django-free, so the platform (market.selectors.predictions) and the simulator (allocator.sim) use the
same rule. A prediction is the median and 90th percentile of the runtimes of the most similar finished jobs,
taken at the narrowest match level that has enough of them:

1. same team, same name family, same gang size
2. same team, same program (the command's family: any arguments), same gang size
3. same team, same name family
4. same team, same program (any arguments)
5. same team, same gang size
6. any team, same gang size

A command's family is the program it runs, not the command: `demo_job --seconds 30` and `--seconds 180` are
one program, so their runtimes are pooled, and the level says "same program with any arguments" rather than
"same command", which it is not (issue 37 §5). A job whose runtime its arguments decide is best named by run
(the name levels come first).

Only jobs that finished at or before the moment of the prediction count (`RuntimeHistory.add` is called as they
finish; `predict_at` filters a list), so a prediction never looks ahead. A job that already ran `done_s`
(preempted and requeued, or running now) is predicted from the similar jobs that ran at least that long: its
remaining time is their quantile minus `done_s`. With too few similar jobs at every level there is no
prediction (cold start), and the caller says so.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Fewer similar jobs than this at a level: go one level wider (three runtimes give a median worth showing).
MIN_BASIS = 3
# At most this many of the newest runtimes per key: workloads drift, and old runs of a family say less.
WINDOW = 200

_DIGITS = re.compile(r"\d+")
_SEPARATORS = re.compile(r"[\s_\-.:/#]+$")


def name_family(name: str) -> str:
    """A job name without its run numbers (digits, and any left at the end): "train-resnet-run17" and
    "train-resnet-run18" are both "train-resnet-run"."""
    return _SEPARATORS.sub("", _DIGITS.sub("#", name.strip().lower()))


_NUMBER = re.compile(r"^[\d.,:eE+-]+$")


def command_family(command: str) -> str:
    """The program, module and script a command runs, without paths, flags and numbers: the first three other
    words. "python /a/train.py --lr 0.1" and "python train.py --lr 0.3" are both "python train.py";
    "python -m pkg.mod --seconds 120" is "python pkg.mod"."""
    words: list[str] = []
    for word in command.split():
        if word.startswith("-") or "=" in word or _NUMBER.match(word):
            continue
        words.append(_DIGITS.sub("#", word.rsplit("/", 1)[-1].lower()))
        if len(words) == 3:
            break
    return " ".join(words)


@dataclass(frozen=True)
class Finished:
    """A finished job as the predictor sees it. `ended_at` is any clock (epoch or trace seconds)."""

    tenant: str
    name_family: str
    command_family: str
    gpus: int
    runtime_s: float
    ended_at: float
    gpu_type: str = ""  # the one type it ran on; "" when unknown or split across types (allocator/speed.py)


@dataclass(frozen=True)
class Query:
    tenant: str
    name_family: str
    command_family: str
    gpus: int


@dataclass(frozen=True)
class Level:
    name: str  # for people: "same team, same name family, same GPUs"
    key: Callable[[str, str, str, int], tuple[object, ...] | None]  # None: the level does not apply


def _level(name: str, key: Callable[[str, str, str, int], tuple[object, ...] | None]) -> Level:
    return Level(name, key)


LEVELS: tuple[Level, ...] = (
    _level("same team, same job name, same GPU count", lambda t, n, c, g: (t, n, g) if n else None),
    # "Program", not "command": the key drops arguments and numbers (command_family), so people must not
    # read it as their exact command.
    _level(
        "same team, same program with any arguments, same GPU count",
        lambda t, n, c, g: (t, c, g) if c else None,
    ),
    _level("same team, same job name", lambda t, n, c, g: (t, n) if n else None),
    _level("same team, same program with any arguments", lambda t, n, c, g: (t, c) if c else None),
    _level("same team, same GPU count", lambda t, n, c, g: (t, g)),
    _level("all teams, same GPU count", lambda t, n, c, g: (g,)),
)


@dataclass(frozen=True)
class Prediction:
    """Runtime figures in seconds. `median_s`/`p90_s` are whole runs of the similar jobs; `remaining_*` what
    is left after `done_s`. `basis` similar jobs at `level` (an index into LEVELS) back it."""

    median_s: float
    p90_s: float
    basis: int
    level: int
    done_s: float = 0.0

    @property
    def level_name(self) -> str:
        return LEVELS[self.level].name

    @property
    def remaining_median_s(self) -> float:
        return max(self.median_s - self.done_s, 0.0)

    @property
    def remaining_p90_s(self) -> float:
        return max(self.p90_s - self.done_s, 0.0)


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of sorted `values`, linear between closest ranks (numpy's default method)."""
    pos = (len(values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


class RuntimeHistory:
    """Finished jobs, indexed by every level's key; feed it in the order jobs finish."""

    def __init__(self, window: int = WINDOW, min_basis: int = MIN_BASIS) -> None:
        self.window = window
        self.min_basis = min_basis
        self._runs: dict[tuple[int, tuple[object, ...]], deque[float]] = defaultdict(
            lambda: deque(maxlen=self.window)
        )

    def add(self, job: Finished) -> None:
        for i, level in enumerate(LEVELS):
            key = level.key(job.tenant, job.name_family, job.command_family, job.gpus)
            if key is not None:
                self._runs[i, key].append(float(job.runtime_s))

    def predict(self, query: Query, done_s: float = 0.0) -> Prediction | None:
        """The narrowest level with at least `min_basis` similar jobs that ran longer than `done_s`."""
        for i, level in enumerate(LEVELS):
            key = level.key(query.tenant, query.name_family, query.command_family, query.gpus)
            runs = self._runs.get((i, key)) if key is not None else None
            if not runs:
                continue
            # A job that ran done_s already is one of those that lasted at least that long.
            alike = sorted(r for r in runs if r > done_s) if done_s > 0 else sorted(runs)
            if len(alike) >= self.min_basis:
                return Prediction(
                    median_s=quantile(alike, 0.5),
                    p90_s=quantile(alike, 0.9),
                    basis=len(alike),
                    level=i,
                    done_s=float(done_s),
                )
        return None


def predict_at(
    query: Query, finished: Iterable[Finished], now: float, done_s: float = 0.0
) -> Prediction | None:
    """A prediction made at `now`: only jobs that had finished by then count, in the order they finished."""
    history = RuntimeHistory()
    past = [f for f in finished if f.ended_at <= now]
    # Ties in finish time are ordered by every field, so the input's order changes nothing.
    for job in sorted(
        past, key=lambda f: (f.ended_at, f.tenant, f.name_family, f.command_family, f.gpus, f.runtime_s)
    ):
        history.add(job)
    return history.predict(query, done_s)
