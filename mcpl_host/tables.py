"""The tables the command line prints (``probe``'s report, ``tools``, ``resources``,
``prompts``): identifiers are never cut.

Rules of this module:

- A column is one of three kinds. ``IDENTIFIER``: the first line of each cell is a value a
  person copies into another command (a tool or prompt name, a URI, a URI template, a
  channel id); it is never cut nor split, the column is at least as wide as the longest.
  Later lines of the cell (a tool's classes) wrap between words. ``WORDS``: names separated
  by spaces (``a*, b``, a MIME type); a line wraps between them, never inside one.
  ``PROSE``: descriptions; they wrap between words, and a word wider than the column is
  folded (a description is read, not copied).
- The layout is decided by ``fit_widths`` (pure): each column gets what it needs (an
  identifier or a word whole; a prose column ``MIN_PROSE_WIDTH`` or less), then the room
  left goes to the columns that want more, those furthest from their natural width first. When what is needed is
  wider than the console, there is no table: each row becomes a block (``print_table``),
  its identifier alone on a line that is never wrapped by us (a terminal may show it on two
  rows; copied, it is one line), the other cells below it, indented, labelled: the short
  ones on one line, each prose one on its own.
- The same rule holds on a terminal and in a file or pipe (rich's width there: ``COLUMNS``,
  else 80). Cells are ``rich.text.Text`` that the caller has already made safe
  (``report.safe_text``); this module adds no server text of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, NamedTuple

from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

__all__ = [
    "IDENTIFIER",
    "MIN_PROSE_WIDTH",
    "PROSE",
    "WORDS",
    "Column",
    "ColumnKind",
    "fit_widths",
    "print_table",
]

ColumnKind = Literal["identifier", "words", "prose"]
IDENTIFIER: ColumnKind = "identifier"
WORDS: ColumnKind = "words"
PROSE: ColumnKind = "prose"
#: Cells (terminal columns) a prose column is given at least before the table gives way to
#: blocks; a prose column whose longest line is shorter needs only that.
MIN_PROSE_WIDTH = 20
#: Cells of a block's indent (the lines under an identifier that did not fit a table).
BLOCK_INDENT = 4
_EMPTY = ("", "—")


class Column(NamedTuple):
    """One column: its ``header`` and its ``kind`` (module rules)."""

    header: str
    kind: ColumnKind


def _longest_word(line: str) -> int:
    return max((cell_len(word) for word in line.split()), default=0)


def _widths(kind: ColumnKind, text: str) -> tuple[int, int]:
    """(need, natural) of one cell in cells: what it needs on a line of its own, and its
    widest line."""
    lines = text.split("\n")
    natural = max(cell_len(line) for line in lines)
    if kind == IDENTIFIER:
        need = max([cell_len(lines[0]), *(_longest_word(line) for line in lines[1:])])
    elif kind == WORDS:
        need = max(_longest_word(line) for line in lines)
    else:
        need = min(natural, MIN_PROSE_WIDTH)
    return need, natural


def fit_widths(needs: Sequence[int], naturals: Sequence[int], width: int) -> list[int] | None:
    """The width of each column (cells, padding and borders excluded) of a table drawn with
    a border around and between the columns and one cell of padding on each side of each,
    in ``width`` cells: each column at least its ``needs`` entry, at most its ``naturals``
    entry (or its need, if larger); the room left goes one cell at a time to the column
    furthest from its natural width (the least width / natural), so a long description
    gets more than a short list of names. None: the needs do not fit. Pure."""
    count = len(needs)
    room = width - (count + 1) - 2 * count
    widths = list(needs)
    if sum(widths) > room:
        return None
    wants = [max(natural, need) for natural, need in zip(naturals, needs, strict=True)]
    spare = room - sum(widths)
    while spare > 0:
        growing = [index for index in range(count) if widths[index] < wants[index]]
        if not growing:
            break
        hungriest = min(growing, key=lambda index: widths[index] / wants[index])
        widths[hungriest] += 1
        spare -= 1
    return widths


def print_table(
    console: Console,
    title: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Text]],
    *,
    caption: str | None = None,
) -> None:
    """Print ``rows`` (one ``Text`` per column each) under ``title`` with the row count, as a
    table whose identifiers stay whole, or as blocks when they cannot (module rules); an
    empty list is one dim line ``title: none``."""
    if not rows:
        console.print(Text(f"{title}: none", style="dim"))
        return
    needs: list[int] = []
    naturals: list[int] = []
    for index, column in enumerate(columns):
        measured = [_widths(column.kind, row[index].plain) for row in rows]
        header_need, header_natural = _widths(WORDS, column.header)
        needs.append(max([header_need, *(need for need, _ in measured)]))
        naturals.append(max([header_natural, *(natural for _, natural in measured)]))
    widths = fit_widths(needs, naturals, console.width)
    heading = f"{title} ({len(rows)})"
    if widths is None:
        _print_blocks(console, heading, columns, rows, caption)
        return
    table = Table(
        title=heading, title_justify="left", title_style="bold", caption=caption, caption_justify="left"
    )
    for column, column_width in zip(columns, widths, strict=True):
        # Every identifier and word fits its column (fit_widths): folding can only ever
        # split a prose word wider than its column.
        table.add_column(column.header, width=column_width, overflow="fold")
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _print_blocks(
    console: Console,
    heading: str,
    columns: Sequence[Column],
    rows: Sequence[Sequence[Text]],
    caption: str | None,
) -> None:
    """Each row as a block: the first line of its first cell (the identifier) alone and never
    wrapped; under it, indented, one line with the rest of that cell and every other
    non-empty cell that is not prose, labelled; then each prose cell on its own lines,
    labelled."""
    console.print(Text(heading, style="bold"))
    for row in rows:
        first, *others = row
        lines = first.split("\n")
        console.print(lines[0], soft_wrap=True)
        short: list[Text] = list(lines[1:])
        prose: list[Text] = []
        for column, cell in zip(columns[1:], others, strict=True):
            if cell.plain not in _EMPTY:
                labelled = Text.assemble((f"{column.header}: ", "dim"), cell)
                (prose if column.kind == PROSE else short).append(labelled)
        details = [Text("  ").join(short)] if short else []
        for detail in [*details, *prose]:
            console.print(Padding(detail, (0, 0, 0, BLOCK_INDENT), expand=False))
    if caption:
        console.print(Text(caption, style="dim"))
