from django import template

from market.money import format_credits

register = template.Library()


@register.filter
def credits(micro: int) -> str:
    return format_credits(micro)
