"""Plain-text tables for the command line and the demo."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence


def fmt_cell(v: object) -> str:
    """One table cell: a float to 4 places below 10, else 2; ``-`` for a missing value."""
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.2f}"
    return "-" if v is None else str(v)


def fmt_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> str:
    """Rows of dicts as an aligned text table with the given columns (floats as :func:`fmt_cell`)."""
    cells = [[fmt_cell(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)


def html_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> str:
    """The same rows as an HTML table (Jupyter), cells as :func:`fmt_cell`, escaped."""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt_cell(r[c]))}</td>" for c in columns) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
