"""The report's tables: each in a box of its own that scrolls sideways when the table is wider than the page
(the page itself never does), numbers kept on one line, long text cells allowed to wrap, and a tooltip on any
cell that has more to say than fits in it."""

from __future__ import annotations

import html

import pandas as pd

# a cell longer than this (a path, a sentence) may wrap anywhere rather than widen its column
LONG_CELL = 18

TABLE_CSS = """
.table-box { overflow-x: auto; max-width: 100%; margin: 0.6em 0; }
table.headline { border-collapse: collapse; font-size: 0.9em; }
table.headline th, table.headline td { padding: 4px 6px; border-bottom: 1px solid #ddd; text-align: right; }
table.headline th { vertical-align: bottom; }
table.headline td { white-space: nowrap; }
table.headline td.long { white-space: normal; overflow-wrap: anywhere; min-width: 9em; text-align: left; }
table.headline td:first-child, table.headline th:first-child { text-align: left; }
table.headline td[title] { text-decoration: underline dotted; cursor: help; }
"""


def table_html(df: pd.DataFrame, tips: dict[tuple[int, str], str] | None = None) -> str:
    """``df`` (already formatted as text) as a table in its box; ``tips`` maps (row position, column) to a
    tooltip for that cell."""
    tips = tips or {}
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for i, row in enumerate(df.itertuples(index=False, name=None)):
        cells = []
        for col, v in zip(df.columns, row, strict=True):
            text = "-" if v is None else str(v)
            attrs = " class='long'" if len(text) > LONG_CELL else ""
            if (i, col) in tips:
                attrs += f" title='{html.escape(tips[i, col], quote=True)}'"
            cells.append(f"<td{attrs}>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<div class='table-box'><table class='headline'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></div>")
