"""Numbers as the terminal views show them: exact (23,145,678) when the table has the room,
else abbreviated (23.1M) by `abbreviate`, the one formatter every table uses; `--json` always
carries the exact values."""

from __future__ import annotations

from dataclasses import dataclass

UNITS = ("k", "M", "G", "T", "P", "E")  # SI prefixes: "B" would read as bytes
EXACT_BELOW = 10_000  # 9,999 is as short as 10.0k and exact


def abbreviate(n: float) -> str:
    """9 -> 9, 9999 -> 9,999, 23145 -> 23.1k, 4200000 -> 4.2M, 10**12 -> 1.0T; floats below
    EXACT_BELOW keep one decimal (12.5). At most 6 characters up to 999.9E (a bigint is 9.2E)."""
    sign = "-" if n < 0 else ""
    value = abs(n)
    if value < EXACT_BELOW:
        return sign + (f"{value:,}" if isinstance(n, int) else f"{value:,.1f}")
    for unit in UNITS:
        value /= 1000
        # 999,950 is 1000.0k once rounded: that is 1.0M
        if round(value, 1) < 1000 or unit == UNITS[-1]:
            return f"{sign}{value:.1f}{unit}"
    raise AssertionError("unreachable")


@dataclass(frozen=True)
class Number:
    """A numeric table cell: `exact` or `short` as the width allows; `mark` goes before either
    (~ for an estimate). str() is the exact form (f-strings, piped output)."""

    value: int | float
    mark: str = ""

    @property
    def exact(self) -> str:
        if isinstance(self.value, int):
            return f"{self.mark}{self.value:,}"
        return f"{self.mark}{self.value:,.1f}"

    @property
    def short(self) -> str:
        return self.mark + abbreviate(self.value)

    def __str__(self) -> str:
        return self.exact
