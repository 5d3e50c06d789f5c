"""Market models, one module per concept; Django finds them all through this package."""

from market.models.allowance import Allowance, AllowancePeriod
from market.models.fair_share import FairShareRound, FairShareUsage
from market.models.guarantees import Guarantee
from market.models.hold_policy import HoldPolicy, OnHoldEnd
from market.models.jobs import LEASED_STATES, TERMINAL_STATES, Bid, Job, JobState
from market.models.leases import (
    LIVE_LEASE_STATES,
    PART_ENDED,
    EndReason,
    Lease,
    LeaseGpu,
    LeasePart,
    LeaseState,
    PartState,
    PreemptReason,
)
from market.models.ledger import (
    Account,
    AccountKind,
    EntryKind,
    Hold,
    HoldState,
    JournalEntry,
    Posting,
)
from market.models.outbox import Command, CommandKind, CommandState
from market.models.policy import MarketPolicy
from market.models.policy_versions import (
    CanaryState,
    ImmutableVersionError,
    OnExpiry,
    PolicyCanary,
    PolicyVersion,
    VersionKind,
    VersionStatus,
)
from market.models.rounds import (
    DONE_STATES,
    BidOutcome,
    Reservation,
    Round,
    RoundLoss,
    RoundPrice,
    RoundState,
)
from market.models.shadow import ShadowRound, ShadowRun
from market.models.spend_alerts import (
    AlertAction,
    AlertKind,
    SpendAlertFiring,
    SpendAlertRule,
    WebhookDelivery,
)
from market.models.usage import LeaseUsage, UsageColumns, UsageMinute, UsageReport, UsageSample

__all__ = [
    "PART_ENDED",
    "LeasePart",
    "PartState",
    "DONE_STATES",
    "LEASED_STATES",
    "LIVE_LEASE_STATES",
    "TERMINAL_STATES",
    "Account",
    "AccountKind",
    "AlertAction",
    "AlertKind",
    "Allowance",
    "AllowancePeriod",
    "Bid",
    "BidOutcome",
    "RoundLoss",
    "Command",
    "CommandKind",
    "CommandState",
    "EndReason",
    "EntryKind",
    "FairShareRound",
    "FairShareUsage",
    "Guarantee",
    "Hold",
    "HoldPolicy",
    "HoldState",
    "Job",
    "JobState",
    "JournalEntry",
    "Lease",
    "LeaseGpu",
    "LeaseState",
    "LeaseUsage",
    "MarketPolicy",
    "CanaryState",
    "ImmutableVersionError",
    "OnExpiry",
    "PolicyCanary",
    "PolicyVersion",
    "VersionKind",
    "VersionStatus",
    "OnHoldEnd",
    "Posting",
    "PreemptReason",
    "Reservation",
    "Round",
    "RoundPrice",
    "RoundState",
    "ShadowRound",
    "ShadowRun",
    "SpendAlertFiring",
    "SpendAlertRule",
    "UsageReport",
    "UsageColumns",
    "UsageMinute",
    "UsageSample",
    "WebhookDelivery",
]
