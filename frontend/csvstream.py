"""CSV exports as streaming responses: rows are written as the queryset's cursor yields them."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence

from django.http import StreamingHttpResponse


class _Echo:
    """A file-like object whose write returns the line, so csv.writer feeds the response."""

    def write(self, value: str) -> str:
        return value


def cell(text: str) -> str:
    """Spreadsheets run a cell starting with = + - @ as a formula: text a tenant typed must not be one."""
    return "'" + text if text[:1] in ("=", "+", "-", "@") else text


def csv_response(
    header: Sequence[str], rows: Iterable[Sequence[object]], filename: str
) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())

    def lines() -> Iterator[str]:
        yield writer.writerow(header)
        for row in rows:
            yield writer.writerow(row)

    response = StreamingHttpResponse(lines(), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
