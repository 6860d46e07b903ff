"""Tables that read at the terminal's width: variant labels whole, no cell over two lines.

rich, left alone, squeezes an over-wide table by shrinking its widest columns and, as a last
resort, every column evenly, so at 100 columns a ranking's variant cells came out as `off_po…`
for every row and nobody could tell which variant won. Here the widths are chosen before rich
sees the table: label and id columns keep their full width, the other cells may wrap onto at
most two lines, and when even that does not fit, the least important columns are left out
(and the caption says which). Every cell, header and title is a rich Text, never markup, so
bracketed text (`[95%]`, `E[regret]`) prints as written.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Optional, Sequence, Union

from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from ablate.analysis.labels import ASSIGN

Cell = Union[str, Text, RenderableType]
PADDING = (0, 1, 0, 0)  # right only: with the separator, columns sit two spaces apart
MAX_LINES = 2  # a cell wrapped further than this is a paragraph, not a table cell


@dataclass
class Col:
    """One column: its cells top to bottom, and how it may give way to a narrow terminal."""

    header: str
    cells: list[Cell]
    justify: str = "right"
    whole: bool = False  # labels and ids: never wrapped, never truncated
    unbroken: bool = False  # cells never wrapped (an estimate and its interval), header may
    keep: bool = False  # never left out (the rank and the label)
    drop: int = 0  # among the others, higher is left out first when the terminal is narrow
    width: Optional[int] = None  # a fixed-width renderable (a progress bar)
    summary: str = ""  # said in the caption instead when left out (e.g. every verdict is "ok")
    # a narrower form (an estimate without its interval), taken where the column would
    # otherwise be left out; with `keep`, the column is then never left out (B at 80 columns)
    narrow: Optional[list[Cell]] = None
    narrow_header: str = ""
    narrow_note: str = ""  # its name in the caption's line on what is shown narrow
    texts: list[Text] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.texts = [c if isinstance(c, Text) else Text(c) for c in self.cells
                      if isinstance(c, (str, Text))]


def _two_lines(label: Cell) -> Cell:
    """`a=1,b=2,c=3` (or a shortened `1, 2, 3`) broken after the comma that best halves it,
    every `axis=value` (value) whole: the last resort before columns are left out for a long
    multi-axis label."""
    if not isinstance(label, str):
        return label
    sep = ", " if ", " in label else ","
    parts = label.split(sep) if sep == ", " else ASSIGN.split(label)
    if len(parts) < 2:
        return label
    k = min(range(1, len(parts)), key=lambda k: max(len(sep.join(parts[:k])) + 1,
                                                    len(sep.join(parts[k:]))))
    return sep.join(parts[:k]) + ",\n" + sep.join(parts[k:])


# ---------------------------------------------------------------------------------------------
# widths

def _lines(console: Console, text: Text, width: int) -> int:
    return len(text.wrap(console, width, overflow="fold"))


@dataclass
class Widths:
    """A column's content widths: `tight` takes every cell and the header onto at most
    MAX_LINES lines, `cells` puts every cell on one line (the header may still wrap onto
    two), `full` puts the header on one line too."""

    full: int
    cells: int
    tight: int


def _tightest(console: Console, texts: list[Text], natural: int) -> int:
    # never split a word: a header folded mid-word ("verd/ict") is unreadable
    words = max((cell_len(w) for t in texts for w in t.plain.split()), default=1)
    tight = max(words, (natural + MAX_LINES - 1) // MAX_LINES)
    while tight < natural and any(_lines(console, t, tight) > MAX_LINES for t in texts):
        tight += 1
    return tight


def _span(t: Text) -> int:
    """Width of a text's longest line (a split label has two)."""
    return max(cell_len(line) for line in t.plain.split("\n"))


def _widths(console: Console, col: Col) -> Widths:
    if col.width is not None:
        return Widths(col.width, col.width, col.width)
    header = Text(col.header)
    full = max(_span(t) for t in (header, *col.texts))
    if col.whole:
        return Widths(full, full, full)
    one_line = max((_span(t) for t in col.texts), default=0)
    cells = max(one_line, _tightest(console, [header], cell_len(header.plain)))
    if col.unbroken:  # `0.879 [0.861, 0.899]` is one unit: split, the number loses its interval
        return Widths(full, cells, cells)
    return Widths(full, cells, _tightest(console, [header, *col.texts], full))


def _grow(target: list[int], widths: list[int], room: int) -> tuple[list[int], int]:
    """Spare room to the columns that need least to reach `target`, so that as many as
    possible reach it (a column given less would still wrap, so it gets nothing)."""
    widths = list(widths)
    for i in sorted(range(len(widths)), key=lambda i: target[i] - widths[i]):
        need = max(0, target[i] - widths[i])
        if need <= room:
            room -= need
            widths[i] += need
    return widths, room


def narrowed(c: Col) -> Col:
    """The column in its narrower form (its cells and header), or itself when it has none."""
    if c.narrow is None:
        return c
    return replace(c, cells=list(c.narrow), header=c.narrow_header or c.header, narrow=None)


def _layout(console: Console, cols: list[Col], width: int
            ) -> tuple[list[Col], list[int], list[Col]]:
    """The columns that fit `width`, their widths, and the column of `cols` each came from:
    from the tightest, first every cell onto one line, then every header. The least important
    column gives way first: in its narrow form where it has one, else left out."""
    shown, origin = list(cols), list(cols)
    while True:
        measured = [_widths(console, c) for c in shown]
        tight = [m.tight for m in measured]
        room = width - _overhead(len(shown)) - sum(tight)
        yielding = [i for i, c in enumerate(shown) if not c.keep or c.narrow is not None]
        if room >= 0 or not yielding:
            widths, room = _grow([m.cells for m in measured], tight, max(0, room))
            return shown, _grow([m.full for m in measured], widths, room)[0], origin
        i = max(yielding, key=lambda i: (shown[i].drop, i))
        if shown[i].narrow is not None:
            shown[i] = narrowed(shown[i])
        else:
            del shown[i], origin[i]


def _overhead(n: int) -> int:
    """Characters a table of n columns spends outside its cells: box.SIMPLE_HEAD without its
    edges puts a one-space separator between columns, after each column's one-space right
    padding (PADDING): two spaces apart, so a 7-column ranking fits 80 columns."""
    return 2 * (n - 1) if n else 0


def table(console: Console, title: str, cols: list[Col], *, caption: str = "",
          legend: str = "", row_styles: Optional[list[str]] = None,
          width: Optional[int] = None, split_last: bool = False,
          col_notes: Sequence[tuple[Sequence[str], str]] = ()) -> Group:
    """The title (and legend) lines, a rich Table of `cols` laid out for `width` (default:
    the console's) columns, and the caption lines. Title and caption are lines of their own,
    wrapped at the terminal's width rather than at a narrow table's. `split_last`: a long
    label goes onto two lines only when it does not fit on one even beside the kept columns
    alone (the dry run's full names, one a line for grep), not to keep more columns."""
    width = width or console.width
    shown, widths, origin = _layout(console, cols, width)
    crowded = len(shown) < len(cols) and (
        not split_last or sum(widths) + _overhead(len(shown)) > width)
    if crowded:  # a long label crowds columns out: try it on two lines
        split = [replace(c, cells=[_two_lines(x) for x in c.cells]) if c.whole and c.keep
                 else c for c in cols]
        shown2, widths2, origin2 = _layout(console, split, width)
        if len(shown2) > len(shown):
            cols, shown, widths, origin = split, shown2, widths2, origin2
    hidden = [c for c in cols if not any(c is o for o in origin)]
    narrow = [s for s, o in zip(shown, origin) if s is not o]
    left_out = [c.header for c in hidden if not c.summary]
    # a note explaining columns goes with them: none for a column a narrow terminal hid
    heads = {c.header for c in origin} | {c.header for c in shown}
    said = "; ".join(text for hs, text in col_notes if heads.intersection(hs))
    caption = "; ".join(x for x in (said, caption) if x)
    notes = [caption] if caption else []
    notes += [c.summary for c in hidden if c.summary]
    said_narrow = list(dict.fromkeys(c.narrow_note for c in narrow if c.narrow_note))
    if said_narrow:
        what = ("the estimate without its interval" if len(said_narrow) == 1
                else "estimates without their intervals")
        notes.append(f"{', '.join(said_narrow)}: {what} at {width} columns (see --json)")
    if left_out:
        notes.append(f"not shown at {width} columns: {', '.join(left_out)} (see --json)")
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=PADDING)
    for c, w in zip(shown, widths):
        t.add_column(Text(c.header), justify=c.justify,  # type: ignore[arg-type]
                     width=w, no_wrap=c.whole, overflow="fold")
    n_rows = max((len(c.cells) for c in cols), default=0)
    for i in range(n_rows):
        style = row_styles[i] if row_styles else ""
        t.add_row(*(_cell(c.cells[i]) for c in shown), style=style or None)
    head = Text("\n".join(x for x in (title, legend) if x), style="italic")
    return Group(head, t, *([Text("\n".join(notes), style="dim")] if notes else []))


def _cell(c: Cell) -> RenderableType:
    return Text(c) if isinstance(c, str) else c

