"""What a shadow round changed for a tenant, in words (the console's shadow page; issue 37 §5).

A tenant is counted as changed when any figure of it differs between the live result and the proposal's: bids
won or lost, a bid won on both sides at another price, tier or GPU type (repriced), its preemptions, the GPUs
it holds as fair share measures them, or whether it met its fair share. The page used to show only the counts
of bids gained and lost, so a tenant changed by a repricing alone read as changed with every number equal, and
its round as "Tenants changed: none". Each difference is named here instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _n(value: Any) -> int | float:
    return int(value) if float(value).is_integer() else round(float(value), 1)


def differences(t: Mapping[str, Any]) -> list[str]:
    """The differences of one tenant's figures (a round's, or accumulated over rounds), most telling first."""
    out = []
    if t.get("gained"):
        out.append(f"{_n(t['gained'])} bid(s) won only under the proposal")
    if t.get("lost"):
        out.append(f"{_n(t['lost'])} bid(s) won only live")
    if t.get("repriced"):
        out.append(f"{_n(t['repriced'])} bid(s) won on both sides at another price, tier or GPU type")
    if t.get("preempted_live", 0) != t.get("preempted_proposed", 0):
        out.append(f"preemptions {_n(t['preempted_live'])} → {_n(t['preempted_proposed'])}")
    if "held_live" in t and t["held_live"] != t.get("held_proposed"):
        out.append(f"GPUs held for fair share {_n(t['held_live'])} → {_n(t['held_proposed'])}")
    live, proposed = t.get("complied_live"), t.get("complied_proposed")
    if live is not None and proposed is not None and live != proposed:
        out.append("met its fair share only " + ("under the proposal" if proposed else "live"))
    if t.get("fair_better"):
        out.append(f"met its fair share only under the proposal in {_n(t['fair_better'])} round(s)")
    if t.get("fair_worse"):
        out.append(f"met its fair share only live in {_n(t['fair_worse'])} round(s)")
    return out


def round_changes(tenants: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per tenant a round changed: "alpha: 1 bid(s) won only live; ...", most changed first."""
    ranked = sorted(tenants.items(), key=lambda kv: (-(kv[1].get("gained", 0) + kv[1].get("lost", 0)), kv[0]))
    return [f"{slug}: {'; '.join(differences(t)) or 'a figure not shown here'}" for slug, t in ranked]


def nothing_differed(summary: Mapping[str, Any], *, in_force: bool) -> str:
    """Said plainly when no round of the shadow changed anything, with why (or "" when something did)."""
    rounds = summary.get("rounds", 0)
    if not rounds:
        return ""
    keys = ("gained", "lost", "repriced", "prices_differ")
    if any(summary.get(k) for k in keys) or summary.get("preemptions_live") != summary.get(
        "preemptions_proposed"
    ):
        return ""
    why = (
        "This version's policy is the one in force now, so both sides clear alike."
        if in_force
        else "In these rounds' books its changes did not move any outcome: the same bids fit and won either "
        "way (a change of weight or guarantee shows only when teams compete for the same GPUs)."
    )
    return (
        f"Nothing differed in {rounds} round(s): every bid won or lost as it did live, at the same price and "
        f"tier, with the same preemptions and posted prices. {why}"
    )
