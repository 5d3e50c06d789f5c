"""Ledger writes (ARCHITECTURE.md §Money; docs/ledger.md).

Every effect is one journal entry under a caller-chosen key. A call whose key was used before returns the
first entry, marked `replayed`, and writes nothing, provided its arguments match; otherwise it raises
KeyConflict. The entry row is inserted first, in a savepoint, so that of two concurrent calls with one key the
second waits on the unique index, fails, and re-reads the winner instead of moving money twice.

Account rows are always updated in one order (the tenant's available, its held, then revenue, then top-up),
and a call touches one tenant only, so concurrent calls cannot deadlock on each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.audit import audit
from accounts.models import Tenant, User
from config import idempotency
from config.errors import PolicyError
from config.money import MAX_AMOUNT, format_credits
from market.models import Account, AccountKind, EntryKind, Hold, HoldState, JournalEntry, Posting
from market.selectors.ledger import tenant_spent

KEY_MAX_LENGTH = 200
# Keys come from two places that must never meet (docs/ledger.md §Keys): the system (round:R:job:J for a
# hold, lease:L:settle for its settlement) and clients (a top-up's or refund's key, which an admin chooses).
# A client key is stored as client:<tenant id>:<key>, and no system key may start with client:, so an admin's
# key can neither block a round's hold or a lease's settlement nor pass for one.
CLIENT_KEY_PREFIX = "client:"


def client_key(tenant_id: int, key: str) -> str:
    return f"{CLIENT_KEY_PREFIX}{tenant_id}:{key}"


def key_as_given(stored: str) -> str:
    """The key as its caller gave it: a client key without its scope."""
    if stored.startswith(CLIENT_KEY_PREFIX):
        return stored.split(":", 2)[2]
    return stored


class LedgerError(Exception):
    """Base of every refusal; `code` is what the API reports."""

    code = "ledger_error"


class InvalidAmount(LedgerError, ValueError):
    code = "invalid"

    def __init__(self, message: str, *, field: str = "amount") -> None:
        super().__init__(message)
        self.field = field


class InvalidKey(LedgerError, ValueError):
    code = "invalid"
    field = "key"


class InsufficientFunds(LedgerError):
    code = "insufficient_funds"


class RefundExceedsCharges(InsufficientFunds):
    code = "refund_exceeds_charges"


class KeyConflict(LedgerError):
    """A system key (a hold's, a settlement's) already used for another effect: a bug, never a client's."""

    code = "key_conflict"


class ClientKeyReused(KeyConflict, idempotency.IdempotencyKeyReused):
    """A client's key (a top-up's or refund's) used for another request: the one refusal every door gives
    (config/idempotency.py), 409 idempotency_key_reused naming `key`."""

    code = "idempotency_key_reused"


class UnknownHold(LedgerError):
    code = "unknown_hold"


class HoldClosed(LedgerError):
    code = "hold_closed"


class NotPermitted(LedgerError):
    code = "permission_denied"


@dataclass(frozen=True)
class _Request:
    """What a key stands for; a repeated call must ask for exactly this."""

    kind: str
    tenant_id: int | None
    amount: int
    hold_key: str | None
    memo: str


def _fingerprint(entry: JournalEntry) -> _Request:
    closes_hold = entry.kind in (EntryKind.SETTLE, EntryKind.RELEASE)
    return _Request(
        kind=entry.kind,
        tenant_id=None if closes_hold else entry.tenant_id,
        amount=entry.amount,
        hold_key=entry.hold.key if entry.hold is not None else None,
        memo=entry.memo,
    )


def _check_amount(amount: object, *, field: str = "amount", allow_zero: bool = False) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise InvalidAmount("must be an integer number of micro-credits", field=field)
    if amount < 0 or (amount == 0 and not allow_zero):
        raise InvalidAmount("must be positive" if not allow_zero else "must not be negative", field=field)
    if amount > MAX_AMOUNT:
        raise InvalidAmount(f"must be at most {format_credits(MAX_AMOUNT)} credits", field=field)
    return amount


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key.strip() or len(key) > KEY_MAX_LENGTH:
        raise InvalidKey(f"must be a non-blank string of at most {KEY_MAX_LENGTH} characters")
    return key


def _check_client_key(key: object) -> str:
    """A top-up's or refund's key: the one key rule (config/idempotency.check_key), required."""
    try:
        return idempotency.check_key(key, field="key", required=True)
    except PolicyError as exc:
        raise InvalidKey(exc.message) from exc


def _check_system_key(key: object) -> str:
    key = _check_key(key)
    if key.startswith(CLIENT_KEY_PREFIX):
        raise InvalidKey(f"a system key must not start with {CLIENT_KEY_PREFIX!r}")
    return key


def _require_admin(actor: User | None) -> User:
    if actor is None or not actor.is_staff:
        raise NotPermitted("Only platform admins may do this.")
    return actor


def _find(key: str) -> JournalEntry | None:
    entry = JournalEntry.objects.select_related("hold").filter(key=key).first()
    if entry is not None:
        entry.replayed = True
    return entry


def _refuse(key: str, first: str) -> Exception:
    if key.startswith(CLIENT_KEY_PREFIX):
        return ClientKeyReused(
            f"Idempotency-Key {key_as_given(key)!r} was already used for a different request ({first}).",
            field="key",
        )
    kind, number = first.split(" ")
    return KeyConflict(f"key {key!r} was already used for a different {kind} ({number})")


def _keyed(key: str, request: _Request, write: Callable[[], JournalEntry]) -> JournalEntry:
    """Run write once per key (see the module docstring; config/idempotency.replay_or_create)."""

    def atomic_write() -> JournalEntry:
        with transaction.atomic():
            return write()

    entry, _ = idempotency.replay_or_create(
        key=key,
        find=lambda: _find(key),
        same=lambda entry: _fingerprint(entry) == request,
        name=_name,
        create=atomic_write,
        refuse=_refuse,
    )
    return entry


def _replay(key: str, request: _Request) -> JournalEntry | None:
    """The entry first made under `key` if it asked for `request` (the bulk hold path's check)."""
    return idempotency.replay(
        key=key, found=_find(key), same=lambda e: _fingerprint(e) == request, name=_name, refuse=_refuse
    )


def _name(entry: JournalEntry) -> str:
    return f"{entry.kind} {entry.pk}"


def _tenant_account(tenant: Tenant, kind: AccountKind) -> Account:
    return Account.objects.get_or_create(tenant=tenant, kind=kind)[0]


def _platform_account(kind: AccountKind) -> Account:
    return Account.objects.get_or_create(tenant=None, kind=kind)[0]


_LOCK_ORDER = {AccountKind.AVAILABLE: 0, AccountKind.HELD: 1, AccountKind.REVENUE: 2, AccountKind.TOPUP: 3}


def _post(entry: JournalEntry, legs: list[tuple[Account, int]]) -> None:
    """Apply the legs to the cached balances and write them as postings.

    A tenant account is only debited by a conditional UPDATE (balance >= amount), so two transactions racing
    for the same money cannot both win: the second re-evaluates the condition after the first commits.
    """
    if sum(delta for _, delta in legs) != 0:  # a bug in this module, never a caller's mistake
        raise AssertionError(f"unbalanced legs: {legs}")
    legs = sorted((leg for leg in legs if leg[1]), key=lambda leg: _LOCK_ORDER[AccountKind(leg[0].kind)])
    for account, delta in legs:
        rows = Account.objects.filter(pk=account.pk)
        if account.tenant_id is not None and delta < 0:
            rows = rows.filter(balance__gte=-delta)
        if rows.update(balance=F("balance") + delta) != 1:
            have = Account.objects.get(pk=account.pk).balance
            raise InsufficientFunds(
                f"{account.kind} balance {format_credits(have)} is less than {format_credits(-delta)} credits"
            )
    Posting.objects.bulk_create([Posting(entry=entry, account=a, amount=d) for a, d in legs])


@transaction.atomic
def ledger_topup(*, tenant: Tenant, amount: int, key: str, actor: User, memo: str = "") -> JournalEntry:
    """Add money to a tenant (top-up -> available). Platform admins only; audited. `key` is the client's,
    scoped to the tenant."""
    _require_admin(actor)
    return _topup(
        tenant=tenant,
        amount=amount,
        key=client_key(tenant.pk, _check_client_key(key)),
        actor=actor,
        memo=memo,
    )


@transaction.atomic
def ledger_grant(*, tenant: Tenant, amount: int, key: str, memo: str = "") -> JournalEntry:
    """A top-up by the platform itself (a recurring allowance): no person acts, so no admin check; audited
    with no actor. `key` is a system key (never in the clients' namespace)."""
    return _topup(tenant=tenant, amount=amount, key=_check_system_key(key), actor=None, memo=memo)


def _topup(*, tenant: Tenant, amount: int, key: str, actor: User | None, memo: str) -> JournalEntry:
    amount = _check_amount(amount)
    request = _Request(EntryKind.TOPUP, tenant.pk, amount, None, memo)

    def write() -> JournalEntry:
        entry = JournalEntry.objects.create(
            key=key, kind=EntryKind.TOPUP, tenant=tenant, amount=amount, memo=memo, actor=actor
        )
        legs = [(_tenant_account(tenant, AccountKind.AVAILABLE), amount)]
        _post(entry, legs + [(_platform_account(AccountKind.TOPUP), -amount)])
        audit(actor=actor, tenant=tenant, action="ledger.topup", detail=_detail(entry))
        return entry

    return _keyed(key, request, write)


@transaction.atomic
def ledger_refund(*, tenant: Tenant, amount: int, key: str, actor: User, memo: str = "") -> JournalEntry:
    """Give back charged money (revenue -> available), never more than the tenant's net charges so far."""
    _require_admin(actor)
    amount, key = _check_amount(amount), client_key(tenant.pk, _check_client_key(key))
    request = _Request(EntryKind.REFUND, tenant.pk, amount, None, memo)

    def write() -> JournalEntry:
        entry = JournalEntry.objects.create(
            key=key, kind=EntryKind.REFUND, tenant=tenant, amount=amount, memo=memo, actor=actor
        )
        available = _tenant_account(tenant, AccountKind.AVAILABLE)
        # Serialises refunds of one tenant, so two of them cannot both fit under the same charges.
        Account.objects.select_for_update(no_key=True).filter(pk=available.pk).get()
        spent = tenant_spent(tenant=tenant)
        if amount > spent:
            raise RefundExceedsCharges(
                f"refund of {format_credits(amount)} credits exceeds the tenant's net charges "
                f"({format_credits(spent)} credits)"
            )
        _post(entry, [(available, amount), (_platform_account(AccountKind.REVENUE), -amount)])
        audit(actor=actor, tenant=tenant, action="ledger.refund", detail=_detail(entry))
        return entry

    return _keyed(key, request, write)


@transaction.atomic
def ledger_hold_extend(
    *, hold_key: str, amount: int, key: str, memo: str = "", lease_id: int | None = None
) -> JournalEntry:
    """Add `amount` to an open hold (available -> held): a job whose hold ran short runs on, paid from the
    available balance. Refused with InsufficientFunds rather than overdrawing, HoldClosed once settled. On a
    shared hold the caller adds the same amount to its lease's share (market.services.holds)."""
    amount, key = _check_amount(amount), _check_system_key(key)
    hold = Hold.objects.select_related("tenant").filter(key=hold_key).first()
    if hold is None:
        raise UnknownHold(f"no hold with key {hold_key!r}")
    request = _Request(EntryKind.HOLD, hold.tenant_id, amount, hold_key, memo)

    def write() -> JournalEntry:
        entry = JournalEntry.objects.create(
            key=key,
            kind=EntryKind.HOLD,
            tenant=hold.tenant,
            amount=amount,
            hold=hold,
            memo=memo,
            lease_id=lease_id,
        )
        locked = Hold.objects.select_for_update(no_key=True).get(pk=hold.pk)
        if locked.state != HoldState.OPEN:
            raise HoldClosed(f"hold {hold_key!r} was already settled")
        legs = [(_tenant_account(hold.tenant, AccountKind.AVAILABLE), -amount)]
        _post(entry, legs + [(_tenant_account(hold.tenant, AccountKind.HELD), amount)])
        Hold.objects.filter(pk=hold.pk).update(amount=F("amount") + amount)
        return entry

    return _keyed(key, request, write)


@transaction.atomic
def ledger_settle(
    *, hold_key: str, charge: int, key: str, share: int | None = None, lease_id: int | None = None
) -> JournalEntry:
    """Close a hold, or one share of a shared one (`share`: one lease's part, docs/ledger.md §Holds): charge
    at most the share (held -> revenue) and release the rest of it (held -> available). `share=None`: all that
    is still held. The hold is settled when its last share is."""
    return _close_hold(
        kind=EntryKind.SETTLE, hold_key=hold_key, charge=charge, key=key, share=share, lease_id=lease_id
    )


@transaction.atomic
def ledger_release(
    *, hold_key: str, key: str, share: int | None = None, lease_id: int | None = None
) -> JournalEntry:
    """Close a hold (or one share of it) charging nothing."""
    return _close_hold(
        kind=EntryKind.RELEASE, hold_key=hold_key, charge=0, key=key, share=share, lease_id=lease_id
    )


def _close_hold(
    *, kind: EntryKind, hold_key: str, charge: int, key: str, share: int | None, lease_id: int | None
) -> JournalEntry:
    charge = _check_amount(charge, field="charge", allow_zero=True)
    key = _check_system_key(key)
    request = _Request(kind, None, charge, hold_key, "")

    def write() -> JournalEntry:
        hold = Hold.objects.select_related("tenant").filter(key=hold_key).first()
        if hold is None:
            raise UnknownHold(f"no hold with key {hold_key!r}")
        # The entry goes in before the hold is locked, so that a concurrent call with the same key fails on
        # the key (and replays) rather than finding the hold closed.
        entry = JournalEntry.objects.create(
            key=key, kind=kind, tenant=hold.tenant, amount=charge, hold=hold, lease_id=lease_id
        )
        # Figures from the locked row: another share of the same hold may have been settled meanwhile.
        locked = Hold.objects.select_for_update(no_key=True).get(pk=hold.pk)
        if locked.state != HoldState.OPEN:
            raise HoldClosed(f"hold {hold_key!r} was already settled")
        left = locked.amount - locked.closed
        last = locked.parts_closed + 1 == locked.parts
        # The last share takes whatever is left (a share's own extensions are in it, so this is the share).
        part = left if share is None or last else share
        if part < 0 or part > left:  # a bug (a share recorded wrong), never a caller's input
            raise AssertionError(f"share {share} of hold {hold_key!r} exceeds the {left} still held")
        charged = min(charge, part)
        tenant = hold.tenant
        legs = [
            (_tenant_account(tenant, AccountKind.HELD), -part),
            (_tenant_account(tenant, AccountKind.AVAILABLE), part - charged),
            (_platform_account(AccountKind.REVENUE), charged),
        ]
        _post(entry, legs)
        locked.charged += charged
        locked.closed += part
        locked.parts_closed = locked.parts if share is None else locked.parts_closed + 1
        if locked.parts_closed == locked.parts:
            locked.state, locked.settled_at = HoldState.SETTLED, timezone.now()
        locked.save(update_fields=["state", "charged", "closed", "parts_closed", "settled_at"])
        entry.hold = locked
        return entry

    return _keyed(key, request, write)


def _detail(entry: JournalEntry) -> dict[str, object]:
    return {"entry": entry.pk, "key": entry.key, "amount": entry.amount, "memo": entry.memo}
