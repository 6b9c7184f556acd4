"""Plain-text tables for the command line and the demo."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def fmt_table(rows: Sequence[Mapping[str, object]], columns: Sequence[str]) -> str:
    """Rows of dicts as an aligned text table with the given columns (floats to 4 significant places)."""

    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 10 else f"{v:.2f}"
        return "-" if v is None else str(v)

    cells = [[cell(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(v.rjust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
