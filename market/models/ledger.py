"""The ledger: append-only double entry in integer micro-credits (ARCHITECTURE.md §Money, docs/ledger.md).

Sign convention: a posting adds its amount to its account's balance, and every entry's postings sum to zero.
Tenants own an `available` and a `held` account, which may never go negative; the platform owns `revenue`
and `topup` (the source of all money, so its balance is minus everything ever topped up).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AccountKind(models.TextChoices):
    AVAILABLE = "available", "Available"
    HELD = "held", "Held"
    REVENUE = "revenue", "Revenue"
    TOPUP = "topup", "Top-up"


TENANT_KINDS = (AccountKind.AVAILABLE, AccountKind.HELD)
PLATFORM_KINDS = (AccountKind.REVENUE, AccountKind.TOPUP)


class Account(models.Model):
    """One account; `balance` caches the sum of its postings (`ledger_check` verifies it)."""

    tenant = models.ForeignKey(
        "accounts.Tenant", null=True, blank=True, on_delete=models.PROTECT, related_name="ledger_accounts"
    )
    kind = models.CharField(max_length=16, choices=AccountKind.choices)
    balance = models.BigIntegerField(
        default=0, help_text="Micro-credits; the sum of this account's postings."
    )

    class Meta:
        ordering = ["tenant_id", "kind"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "kind"],
                condition=models.Q(tenant__isnull=False),
                name="account_tenant_kind",
            ),
            models.UniqueConstraint(
                fields=["kind"], condition=models.Q(tenant__isnull=True), name="account_platform_kind"
            ),
            models.CheckConstraint(
                condition=models.Q(tenant__isnull=False, kind__in=TENANT_KINDS)
                | models.Q(tenant__isnull=True, kind__in=PLATFORM_KINDS),
                name="account_kind_matches_owner",
            ),
            # The backstop for "no overdraft": services refuse first, the database refuses regardless.
            models.CheckConstraint(
                condition=models.Q(tenant__isnull=True) | models.Q(balance__gte=0),
                name="account_tenant_nonnegative",
            ),
        ]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        return f"{self.tenant.slug if self.tenant is not None else 'platform'}:{self.kind}"


class EntryKind(models.TextChoices):
    TOPUP = "topup", "Top-up"
    HOLD = "hold", "Hold"
    SETTLE = "settle", "Settle"
    RELEASE = "release", "Release"
    REFUND = "refund", "Refund"


class HoldState(models.TextChoices):
    OPEN = "open", "Open"
    SETTLED = "settled", "Settled"


class Hold(models.Model):
    """Money moved from available to held until settlement charges part of it and releases the rest.

    A round holds once per tenant for all its winners (docs/ledger.md §Holds): the hold's `parts` leases each
    record their share (`Lease.hold_share`), and settling one closes only that share (`closed`, `parts_closed`,
    `charged` grow by it); the hold is settled when its last part is. A hold placed alone has one part."""

    key = models.CharField(max_length=200)  # unique: hold_key below
    # Indexed by hold_tenant_state, which leads with it.
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="holds", db_index=False
    )
    amount = models.BigIntegerField()
    state = models.CharField(max_length=16, choices=HoldState.choices, default=HoldState.OPEN)
    charged = models.BigIntegerField(default=0)
    # The shares settled or released so far: their amount and how many. held = amount - closed while open.
    closed = models.BigIntegerField(default=0, db_default=0)
    parts = models.PositiveIntegerField(default=1, db_default=1)
    parts_closed = models.PositiveIntegerField(default=0, db_default=0)
    created_at = models.DateTimeField(default=timezone.now)
    settled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant", "state"], name="hold_tenant_state")]
        # Keys unique by a constraint rather than unique=True, which on PostgreSQL adds a LIKE index no query
        # uses: a round writes thousands of holds, and every index of them (docs/rounds.md §Measured).
        constraints = [
            models.UniqueConstraint(fields=["key"], name="hold_key"),
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="hold_amount_nonnegative"),
            models.CheckConstraint(
                condition=models.Q(
                    charged__gte=0, charged__lte=models.F("closed"), closed__lte=models.F("amount")
                ),
                name="hold_charged_within_closed",
            ),
            models.CheckConstraint(
                condition=models.Q(parts__gte=1, parts_closed__lte=models.F("parts")),
                name="hold_parts_within",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    state=HoldState.OPEN, settled_at__isnull=True, parts_closed__lt=models.F("parts")
                )
                | models.Q(
                    state=HoldState.SETTLED,
                    settled_at__isnull=False,
                    parts_closed=models.F("parts"),
                    closed=models.F("amount"),
                ),
                name="hold_state_parts",
            ),
        ]

    def __str__(self) -> str:
        return f"hold {self.key} ({self.state})"


class JournalEntry(models.Model):
    """One keyed effect. `amount` is the figure the caller asked for (the settle charge before capping),
    which a repeated call with the same key must match."""

    # System keys (round:R:job:J, lease:L:settle) or a client's key scoped as client:<tenant id>:<key>.
    key = models.CharField(max_length=240)  # unique: entry_key below (as Hold.key)
    kind = models.CharField(max_length=16, choices=EntryKind.choices)
    # Indexed by entry_tenant_created, which leads with it.
    tenant = models.ForeignKey(
        "accounts.Tenant", on_delete=models.PROTECT, related_name="ledger_entries", db_index=False
    )
    amount = models.BigIntegerField()
    hold = models.ForeignKey(Hold, null=True, blank=True, on_delete=models.PROTECT, related_name="entries")
    memo = models.CharField(max_length=200, blank=True)
    # The lease a settle, release or extension entry is for: a round's hold is shared by its tenant's winners
    # (Hold.parts), so the hold no longer names one. Null on top-ups, refunds and a round's opening hold entry.
    # No constraint and no index: set from the lease its writer holds locked, and read by primary key.
    lease = models.ForeignKey(
        "market.Lease",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    # PROTECT, not SET_NULL: the ledger is append-only, so deleting a user must not rewrite history.
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    # Set on the instance a service returns when the key had already been used (nothing was written).
    replayed = False

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "journal entries"
        indexes = [models.Index(fields=["tenant", "created_at"], name="entry_tenant_created")]
        constraints = [
            models.UniqueConstraint(fields=["key"], name="entry_key"),
            models.CheckConstraint(condition=models.Q(amount__gte=0), name="entry_amount_nonnegative"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key}"


class Posting(models.Model):
    # The ledger's references (a posting's entry and account, an entry's hold and tenant, a hold's tenant) keep
    # their database constraints, unlike the round's bulk-written leases and outcomes: since a round holds once
    # per tenant, not per winner (issue 36), their deferred checks scale with the tenants that won (10,000 holds,
    # entries and 20,000 postings at fleet scale: 0.6 of the round's 22 backend-and-Python CPU-seconds,
    # docs/rounds.md §At fleet scale), and for money a row naming nothing must be refused, not found later.
    # Indexed by posting_entry_account, which leads with it.
    entry = models.ForeignKey(JournalEntry, on_delete=models.PROTECT, related_name="postings", db_index=False)
    account = models.ForeignKey(Account, on_delete=models.PROTECT, related_name="postings")
    amount = models.BigIntegerField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["entry", "account"], name="posting_entry_account"),
            models.CheckConstraint(condition=~models.Q(amount=0), name="posting_amount_nonzero"),
        ]

    def __str__(self) -> str:
        return f"{self.account_id} {self.amount:+d}"
