"""Ledger API shapes. Amounts travel as integer micro-credits, with credit strings alongside for people."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from rest_framework import serializers

from config.api import BodySerializer, QuerySerializer
from config.errors import PolicyError
from config.fields import DecimalStringField, InstantField, TextField
from config.idempotency import KEY_MAX_CHARS, KEY_RULE, KEY_TEXT, header_key
from config.money import MAX_AMOUNT, MICRO, format_credits
from market.models import EntryKind, JournalEntry, Posting
from market.services.ledger import key_as_given

if TYPE_CHECKING:
    from accounts.models import Tenant, User
    from market.models import Hold

# The most one amount may be: MAX_AMOUNT, a billion credits.
CREDITS_MAX = Decimal(MAX_AMOUNT) / MICRO


class BalanceSerializer(serializers.Serializer[object]):
    available = serializers.IntegerField(help_text="Micro-credits free to hold.")
    held = serializers.IntegerField(help_text="Micro-credits held for running leases.")
    spent = serializers.IntegerField(help_text="Net micro-credits charged (settlements minus refunds).")
    available_credits = serializers.CharField()
    held_credits = serializers.CharField()
    spent_credits = serializers.CharField()

    @staticmethod
    def from_balance(balance: Any) -> dict[str, Any]:
        figures = {"available": balance.available, "held": balance.held, "spent": balance.spent}
        return figures | {f"{name}_credits": format_credits(value) for name, value in figures.items()}


class CreditsField(DecimalStringField[int]):
    """Credits as a decimal string ("12.5") or a JSON number (12.5), at most 6 decimals, positive, at most
    CREDITS_MAX (config/fields.DecimalStringField); becomes micro-credits. With allow_zero, "0" is
    taken too (a GPU type's reserve price may be free). Read-only, it renders micro-credits as credits."""

    def __init__(self, *, allow_zero: bool = False, **kwargs: Any) -> None:
        low = Decimal(0) if allow_zero else Decimal(1) / MICRO
        super().__init__(places=6, low=low, high=CREDITS_MAX, **kwargs)

    def to_internal_value(self, data: Any) -> int:
        return int(super().to_internal_value(data) * MICRO)

    def too_many_places(self) -> str:
        return "has more decimals than a micro-credit (6)"

    def too_high(self, high: Decimal) -> str:
        return f"must be at most {format_credits(int(high * MICRO))} credits"

    def to_representation(self, value: int) -> str:
        return format_credits(value)


class MoneyMoveSerializer(BodySerializer):
    """Body of a top-up or refund. The key may come from the body or the Idempotency-Key header."""

    amount = CreditsField(help_text='Credits, e.g. "12.5" (at most 6 decimals).')
    key = TextField(
        required=False,
        max_length=KEY_MAX_CHARS,
        pattern=KEY_TEXT,
        pattern_message=KEY_RULE,
        help_text="Idempotency key (or the Idempotency-Key header; the same one if both are given).",
    )
    memo = TextField(required=False, max_length=200, allow_blank=True, default="")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        try:
            header = header_key(self.context["request"].headers)
        except PolicyError as exc:
            raise serializers.ValidationError({exc.field: exc.message}) from exc
        body = attrs.get("key")
        if body and header and body != header:
            raise serializers.ValidationError({"key": "differs from the Idempotency-Key header"})
        key = body or header
        if not key:
            raise serializers.ValidationError(
                {"key": "an idempotency key is required: 'key' in the body or the Idempotency-Key header"}
            )
        return attrs | {"key": key}


class LedgerFilterSerializer(QuerySerializer):
    kind = serializers.ChoiceField(choices=EntryKind.choices, required=False)
    since = InstantField(required=False, help_text="Entries at or after this date/datetime.")
    until = InstantField(
        required=False, end_of_day=True, help_text="Entries up to this datetime, or through this whole date."
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if "since" in attrs and "until" in attrs and attrs["until"] <= attrs["since"]:
            raise serializers.ValidationError({"until": "must be after since"})
        return attrs


class PostingSerializer(serializers.ModelSerializer[Posting]):
    account = serializers.CharField(source="account.label")

    class Meta:
        model = Posting
        fields = ["account", "amount"]


class EntrySerializer(serializers.ModelSerializer[JournalEntry]):
    amount_credits = serializers.SerializerMethodField()
    key = serializers.SerializerMethodField(help_text="The key as its caller gave it.")
    hold: serializers.SlugRelatedField[Hold] = serializers.SlugRelatedField(
        slug_field="key", read_only=True, allow_null=True
    )
    actor: serializers.SlugRelatedField[User] = serializers.SlugRelatedField(
        slug_field="username", read_only=True, allow_null=True
    )
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    postings = PostingSerializer(many=True, read_only=True)

    class Meta:
        model = JournalEntry
        fields = [
            "id",
            "key",
            "kind",
            "tenant",
            "amount",
            "amount_credits",
            "hold",
            "memo",
            "actor",
            "created_at",
            "postings",
        ]

    def get_amount_credits(self, entry: JournalEntry) -> str:
        return format_credits(entry.amount)

    def get_key(self, entry: JournalEntry) -> str:
        return key_as_given(entry.key)
