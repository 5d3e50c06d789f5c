from __future__ import annotations

from rest_framework import serializers

from accounts.models import ApiToken
from config.api import BodySerializer
from config.fields import TextField


class TenantRoleSerializer(serializers.Serializer[object]):
    slug = serializers.CharField()
    name = serializers.CharField()
    role = serializers.CharField()


class MeSerializer(serializers.Serializer[object]):
    username = serializers.CharField()
    email = serializers.CharField()
    is_admin = serializers.BooleanField()
    token_tenant = serializers.CharField(allow_null=True)
    tenants = TenantRoleSerializer(many=True)


class TokenSerializer(serializers.ModelSerializer[ApiToken]):
    user = serializers.CharField(source="user.username", read_only=True)
    active = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "prefix", "user", "created_at", "last_used_at", "revoked_at", "active"]
        read_only_fields = fields

    def get_active(self, obj: ApiToken) -> bool:
        return obj.revoked_at is None


class TokenCreateSerializer(BodySerializer):
    name = TextField(max_length=100)


class TokenCreatedSerializer(TokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret. It is shown this once only.")

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]
        read_only_fields = fields
