"""How fast each GPU type runs a job, relative to a reference type, from runtimes of similar finished jobs
(docs/predictions.md §Speed per GPU type).

Pure and Django-free, so the platform (market.selectors.speed) and the simulator's replay
(allocator.sim.speeds) use the same rule. A finished job counts here only when it ran on one GPU type (its
`Finished.gpu_type`); a run split across types is a blend of speeds and says nothing about either.

The estimate for type t against the reference type r walks the prediction's match levels (allocator.predict
LEVELS), narrowest first. Within a level, runs are compared only inside a *stratum* (the narrowest key: same
team, name family, command family and GPU count), so that a type that happened to run the long jobs of a
family does not look slow: per stratum that ran on both types, the difference of the centres of the log
runtimes (the interquartile mean from five runs on, the median below); over strata, their median weighted by
min(runs on r, runs on t). A level counts once those weights add up to MIN_PAIRED (a single run on each type
is never enough). The factor is speed_t / speed_r = runtime_r / runtime_t: 2.0 means t finishes in half the
time. The first level whose standard error is at most MEDIUM_SE wins; when none is, the level with the
smallest. No level with enough paired runs: through a third type compared with both (`speeds` only), else
cold start (None).

Centres of log runtimes shrug off outliers and long tails. The standard error (of the log factor) combines
each stratum's sampling error of a median (1.2533 sigma sqrt(1/n_r + 1/n_t), sigma from the median absolute
deviation, at least SIGMA_FLOOR) and, when strata disagree, their spread; it gives a 90% interval and a label.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from allocator.predict import LEVELS, MIN_BASIS, WINDOW, Finished, Query, quantile

# Paired weight a level needs before its factor is trusted: like MIN_BASIS, three comparisons at least.
MIN_PAIRED = 3
# Runtimes of one job family on one type vary at least this much (log scale) even when every sample agrees:
# measurement jitter, data loading. Without a floor, three identical runs would claim perfect certainty.
SIGMA_FLOOR = 0.02
# Standard error of the log factor below which the estimate is called high, then medium confidence.
HIGH_SE, MEDIUM_SE = 0.10, 0.25
_Z90 = 1.645
_MAD_TO_SIGMA = 1.4826
_MEDIAN_SE = 1.2533  # the standard error of a normal sample's median is 1.2533 sigma / sqrt(n)

Stratum = tuple[str, str, str, int]


@dataclass(frozen=True)
class Factor:
    """Type `gpu_type`'s speed relative to the reference (None at cold start), with its basis: `runs` on the
    type and `reference_runs` on the reference in the strata compared, `strata` of them, at `level`."""

    gpu_type: str
    factor: float | None
    runs: int = 0
    reference_runs: int = 0
    strata: int = 0
    level: int | None = None
    se: float | None = None  # standard error of log(factor)
    via: str | None = None  # compared through this third type (no direct pairs with the reference)

    @property
    def level_name(self) -> str:
        return "" if self.level is None else LEVELS[self.level].name

    @property
    def interval(self) -> tuple[float, float] | None:
        """A 90% interval of the factor."""
        if self.factor is None or self.se is None:
            return None
        spread = math.exp(_Z90 * self.se)
        return self.factor / spread, self.factor * spread

    @property
    def confidence(self) -> str:
        if self.factor is None or self.se is None:
            return "none"
        if self.level is None:
            return "reference"
        return "high" if self.se <= HIGH_SE else "medium" if self.se <= MEDIUM_SE else "low"


@dataclass(frozen=True)
class Speeds:
    """Every asked type's factor against `reference`; `reference_median_s` (and `reference_p90_s`) is the median
    (90th percentile) runtime of the similar jobs on the reference type, each run converted by its own type's
    factor (None when too few)."""

    reference: str
    factors: dict[str, Factor]
    reference_median_s: float | None
    median_basis: int = 0
    reference_p90_s: float | None = None

    def runtime_s(self, gpu_type: str) -> float | None:
        """Estimated runtime on `gpu_type`: the reference median divided by the type's factor."""
        return self._on(gpu_type, self.reference_median_s)

    def runtime_p90_s(self, gpu_type: str) -> float | None:
        """The 90th percentile runtime on `gpu_type`, likewise."""
        return self._on(gpu_type, self.reference_p90_s)

    def _on(self, gpu_type: str, reference_s: float | None) -> float | None:
        f = self.factors.get(gpu_type)
        if f is None or f.factor is None or reference_s is None:
            return None
        # To the millisecond: the factor went through logarithms, and 7199.9999999 s would cost a micro-credit
        # less than the 7200 s it is.
        return round(reference_s / f.factor, 3)


def weighted_median(values: Sequence[float], weights: Sequence[float]) -> float:
    """The value where the cumulative weight first reaches half (the mean of the two at an exact tie)."""
    pairs = sorted(zip(values, weights, strict=True))
    half, seen = sum(weights) / 2, 0.0
    for i, (value, weight) in enumerate(pairs):
        seen += weight
        if seen > half:
            return value
        if seen == half:
            return (value + pairs[i + 1][0]) / 2 if i + 1 < len(pairs) else value
    return pairs[-1][0]


def _median(values: Sequence[float]) -> float:
    return quantile(sorted(values), 0.5)


def _mad_sigma(values: Sequence[float]) -> float:
    centre = _median(values)
    return _MAD_TO_SIGMA * _median([abs(v - centre) for v in values])


@dataclass(frozen=True)
class _Pair:
    log_ratio: float  # centre of the log runtimes on the reference minus on the type
    weight: int
    n_ref: int
    n_type: int
    se: float


def _centre(values: Sequence[float]) -> float:
    """The interquartile mean (the middle half's mean) from five values on, else the median: as robust to
    outliers and long tails as the median, and less noisy on the spread-out runtimes of real workloads."""
    if len(values) < 5:
        return _median(values)
    ordered, cut = sorted(values), len(values) // 4
    middle = ordered[cut : len(ordered) - cut]
    return sum(middle) / len(middle)


def _pair(ref: Sequence[float], other: Sequence[float]) -> _Pair:
    """One stratum's comparison of log runtimes on the reference type and on the other type."""
    m_ref, m_type = _centre(ref), _centre(other)
    residuals = [v - m_ref for v in ref] + [v - m_type for v in other]
    sigma = max(_mad_sigma(residuals), SIGMA_FLOOR)
    se = _MEDIAN_SE * sigma * math.sqrt(1 / len(ref) + 1 / len(other))
    return _Pair(m_ref - m_type, min(len(ref), len(other)), len(ref), len(other), se)


def _combine(pairs: list[_Pair]) -> tuple[float, float]:
    """The strata's weighted median log ratio, and its standard error: inverse-variance pooled sampling error,
    or the strata's own spread when they disagree more than sampling explains."""
    log_ratio = weighted_median([p.log_ratio for p in pairs], [p.weight for p in pairs])
    pooled = 1 / math.sqrt(sum(1 / p.se**2 for p in pairs))
    if len(pairs) < 2:
        return log_ratio, pooled
    between = _MEDIAN_SE * _mad_sigma([p.log_ratio for p in pairs]) / math.sqrt(len(pairs))
    return log_ratio, max(pooled, between)


class SpeedHistory:
    """Finished single-type runs, by level key, stratum and GPU type (log runtimes); feed it as jobs finish."""

    def __init__(self, window: int = WINDOW, min_paired: int = MIN_PAIRED) -> None:
        self.window = window
        self.min_paired = min_paired
        self._runs: dict[tuple[int, tuple[object, ...]], dict[Stratum, dict[str, deque[float]]]] = (
            defaultdict(lambda: defaultdict(dict))
        )

    def add(self, job: Finished) -> None:
        # A run of no time or no known type cannot say how fast a type is.
        if not job.gpu_type or job.runtime_s <= 0:
            return
        stratum: Stratum = (job.tenant, job.name_family, job.command_family, job.gpus)
        for i, level in enumerate(LEVELS):
            key = level.key(*stratum)
            if key is not None:
                by_type = self._runs[i, key][stratum]
                runs = by_type.setdefault(job.gpu_type, deque(maxlen=self.window))
                runs.append(math.log(job.runtime_s))

    def _strata(self, query: Query) -> Iterable[tuple[int, dict[Stratum, dict[str, deque[float]]]]]:
        for i, level in enumerate(LEVELS):
            key = level.key(query.tenant, query.name_family, query.command_family, query.gpus)
            found = self._runs.get((i, key)) if key is not None else None
            if found:
                yield i, found

    def factor(self, query: Query, gpu_type: str, reference: str) -> Factor:
        """`gpu_type`'s speed relative to `reference` for jobs like `query`: the narrowest level with
        MIN_PAIRED paired runs whose standard error is at most MEDIUM_SE, else the level with the smallest
        standard error; Factor(None) at cold start."""
        if gpu_type == reference:
            return Factor(gpu_type, 1.0, se=0.0)
        best = Factor(gpu_type, None)
        for i, strata in self._strata(query):
            found = self._at_level(i, strata, gpu_type, reference)
            if found is None:
                continue
            # A narrow match with few runs of long-tailed jobs is mostly noise; a wider one that pools more
            # similar jobs is the better guess then (its bias, different jobs, is smaller than that noise).
            if found.se is not None and found.se <= MEDIUM_SE:
                return found
            if best.se is None or (found.se is not None and found.se < best.se):
                best = found
        return best

    def _at_level(
        self, i: int, strata: dict[Stratum, dict[str, deque[float]]], gpu_type: str, reference: str
    ) -> Factor | None:
        pairs = [
            _pair(by_type[reference], by_type[gpu_type])
            for by_type in strata.values()
            if reference in by_type and gpu_type in by_type
        ]
        if sum(p.weight for p in pairs) < self.min_paired:
            return None
        log_ratio, se = _combine(pairs)
        return Factor(
            gpu_type,
            math.exp(log_ratio),
            runs=sum(p.n_type for p in pairs),
            reference_runs=sum(p.n_ref for p in pairs),
            strata=len(pairs),
            level=i,
            se=se,
        )

    def _reference_runtime(
        self, query: Query, factors: dict[str, Factor]
    ) -> tuple[float | None, float | None, int]:
        """Median and 90th percentile runtime on the reference type of the similar runs (each converted by its
        type's factor) at the narrowest level with MIN_BASIS of them, and how many; runs on types of unknown
        factor are left out."""
        known = {t: f.factor for t, f in factors.items() if f.factor is not None}
        for _, strata in self._strata(query):
            converted = [
                math.exp(v) * known[t]
                for by_type in strata.values()
                for t, runs in by_type.items()
                if t in known
                for v in runs
            ]
            if len(converted) >= MIN_BASIS:
                converted.sort()
                return quantile(converted, 0.5), quantile(converted, 0.9), len(converted)
        return None, None, 0

    def speeds(self, query: Query, types: Sequence[str], reference: str) -> Speeds:
        """Every type's factor against `reference`, and the runtime of a job like `query` on the reference."""
        factors = {t: self.factor(query, t, reference) for t in dict.fromkeys([reference, *types])}
        for t, f in list(factors.items()):
            if f.factor is None:
                factors[t] = self._chained(query, t, reference, factors)
        median, p90, basis = self._reference_runtime(query, factors)
        return Speeds(reference, factors, median, basis, p90)

    def _chained(self, query: Query, gpu_type: str, reference: str, direct: dict[str, Factor]) -> Factor:
        """No direct pairs with the reference: through a third type m compared with both, factor_t/m x
        factor_m/r, their log errors added in quadrature; the least noisy such m, else still a cold start."""
        best = Factor(gpu_type, None)
        for m, to_ref in direct.items():
            if m in (gpu_type, reference) or to_ref.factor is None or to_ref.via is not None:
                continue
            to_m = self.factor(query, gpu_type, m)
            if to_m.factor is None or to_m.se is None or to_ref.se is None or to_m.level is None:
                continue
            se = math.hypot(to_m.se, to_ref.se)
            if best.se is None or se < best.se:
                best = Factor(
                    gpu_type,
                    to_m.factor * to_ref.factor,
                    runs=to_m.runs,
                    reference_runs=to_ref.reference_runs,
                    strata=to_m.strata + to_ref.strata,
                    level=max(to_m.level, to_ref.level or 0),
                    se=se,
                    via=m,
                )
        return best


def limit_for_same_work(
    reference_limit: int, factor: float, reserve: int, max_price: int
) -> tuple[int, str | None]:
    """The limit on a type of speed `factor` (relative to the reference) that costs the same per unit of work
    as `reference_limit` on the reference: limit x factor, clipped to the type's reserve and maximum price.
    The second value says which bound clipped it ("reserve", "max") or None."""
    same = round(reference_limit * factor)
    if same < reserve:
        return reserve, "reserve"
    if same > max_price:
        return max_price, "max"
    return same, None
