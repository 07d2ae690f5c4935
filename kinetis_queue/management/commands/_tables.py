"""The queue_* commands' plain-text tables: columns as wide as their widest cell, two spaces apart; each
cell one line, its control characters (a newline too) escaped by printable()."""

from __future__ import annotations

from collections.abc import Container, Sequence

from kinetis_queue.payload.printable import printable


def table(rows: Sequence[Sequence[str]], numeric: Container[int] = ()) -> list[str]:
    """The lines of ``rows`` (the first is the header): the columns in ``numeric`` right-aligned."""
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            cell.rjust(width) if i in numeric else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
