"""The terminal views' numbers (no server): the one abbreviation, and tables that keep every
number whole at any width by abbreviating, then hiding columns in the given order."""

from __future__ import annotations

import pytest
from rich.console import Console

from pgmq_build.ops import render
from pgmq_build.ops.numbers import Number, abbreviate


@pytest.mark.parametrize(("n", "text"), [
    (9, "9"), (9_999, "9,999"), (10_000, "10.0k"), (23_145, "23.1k"), (120_000, "120.0k"),
    (999_949, "999.9k"), (999_950, "1.0M"), (4_200_000, "4.2M"), (23_145_678, "23.1M"),
    (10**12, "1.0T"), (2**63 - 1, "9.2E"), (-23_145, "-23.1k"), (0, "0"), (12.34, "12.3"),
    (12_345.6, "12.3k"),
])
def test_abbreviate(n, text):
    assert abbreviate(n) == text


def test_a_number_cell_is_exact_unless_short_and_keeps_its_mark():
    cell = Number(23_145_678, "~")
    assert (str(cell), cell.exact, cell.short) == ("~23,145,678", "~23,145,678", "~23.1M")
    assert (Number(2.5).exact, render.count(None), render.rate(1234.56).exact) == ("2.5", "–", "1,234.6")


def drawn(width: int, table) -> list[str]:
    console = Console(width=width, highlight=False, color_system=None, record=True)
    console.print(table)
    return [line.rstrip() for line in console.export_text().splitlines() if line.strip()]


def wide_table():
    return render.table(["queue", "depth", "visible", "delayed", "note"],
                        [["a_rather_long_queue_name", 23_145_678, Number(4_200_000, "~"), 0, "x"]],
                        right=["depth", "visible", "delayed"], drop=["delayed", "visible"])


def test_a_table_abbreviates_then_hides_columns_then_cuts_only_names():
    wide = drawn(200, wide_table())
    assert wide[2].split() == ["a_rather_long_queue_name", "23,145,678", "~4,200,000", "0", "x"]
    # the exact numbers fit once the name gives up room
    assert drawn(60, wide_table())[2].split()[1:] == ["23,145,678", "~4,200,000", "0", "x"]
    # narrower: abbreviated, every column still there
    short = drawn(50, wide_table())
    assert short[2].split()[1:] == ["23.1M", "~4.2M", "0", "x"] and short[2].split()[0] == "a_rather_lon…"
    # narrower: `delayed` hidden, then `visible`, said under the table; the name cut last
    assert "delayed" not in drawn(42, wide_table())[0] and "visible" in drawn(42, wide_table())[0]
    narrow = drawn(30, wide_table())
    assert narrow[0].split() == ["queue", "depth", "note"]
    assert narrow[2].split()[1:] == ["23.1M", "x"] and narrow[2].split()[0].endswith("…")
    assert " ".join(narrow[3:]) == "hidden at this width: delayed, visible"  # wrapped
    assert all(len(line) <= 30 for line in narrow)


def test_a_table_refuses_an_unknown_column():
    with pytest.raises(ValueError, match="no such column"):
        render.table(["queue"], [], right=["depth"])
