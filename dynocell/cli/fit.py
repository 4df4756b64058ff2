"""Tables that never split a number or a word, at any terminal width (issue 20, item 2).

Rich shrinks a too-wide table by folding cells mid-token (``164.│5``,
``p9│9``). :class:`FitTable` is laid out when it is printed, for the width the
console gives it (``COLUMNS`` when piped, see :mod:`dynocell.cli.common`):

1. every column is as wide as its longest line when that fits;
2. else every column is at least as wide as its longest *word* (cells and header
   wrap at spaces only; the key columns keep their whole line when it is at most a
   third of the width) and the spare width goes to the columns closest to their
   full width first;
3. else the table is split into several tables, each repeating the key columns
   (the first ``keys``: the row's name) — e.g. throughput in one, latency in the next;
4. else (not even a key column and one more fit) each row is printed vertically,
   one ``header: value`` line per cell.

Widths are measured with rich's ``cell_len`` (wide characters count double). A
word longer than the whole terminal (a long path) is the only thing still folded.
"""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

#: Columns laid out with ``padding=(0, 1)`` and one separator between columns, no outer edge.
_PAD = 2
#: A column this many cells (or fewer) short of its full width gets them before prose columns share.
SMALL_DEFICIT = 8
#: Narrowest a ``shorten`` column gets before the table is split instead.
SHORTEN_MIN = 24


def _plain(cell: Any) -> str:
    return cell.plain if isinstance(cell, Text) else str(cell)


def _natural(cell: Any) -> int:
    return max((cell_len(line) for line in _plain(cell).splitlines()), default=0)


def _longest_word(cell: Any) -> int:
    return max((cell_len(w) for w in _plain(cell).split()), default=0)


def overhead(ncols: int) -> int:
    """Cells a table of ``ncols`` columns adds to its column widths (padding and separators)."""
    return _PAD * ncols + max(ncols - 1, 0)


class FitTable:
    """A rich-compatible table (``add_row``) that picks its layout by the width it is printed at.

    ``headers``: column titles; ``title``: printed above (left-justified, bold);
    ``keys``: how many leading columns name a row and are repeated when the table is split;
    ``justify``: optional per-header justification (``{"ms": "right"}``);
    ``shorten``: headers of columns whose long cells (kernel names) are cut with ``…`` to the
    width left over rather than wrapped (they ask for only :data:`SHORTEN_MIN` cells);
    ``optional``: headers of columns left out when every cell of theirs is empty.
    Cells are ``str`` or :class:`rich.text.Text` (shown literally, never parsed as markup).
    """

    def __init__(self, *headers: str, title: str | None = None, keys: int = 1,
                 justify: dict[str, str] | None = None, shorten: tuple[str, ...] = (),
                 optional: tuple[str, ...] = ()) -> None:
        self.headers = list(headers)
        self.title = title
        self.keys = max(0, min(keys, len(self.headers) - 1))
        self.justify = dict(justify or {})
        self.shorten = set(shorten)
        self.optional = set(optional)
        self.rows: list[list[Any]] = []

    def _drop_empty_optional(self) -> None:
        """Remove each column named in ``optional`` whose cells are all empty (an ``error`` column of runs
        that all completed takes no width)."""
        keep = [i for i, h in enumerate(self.headers)
                if h not in self.optional or any(_plain(r[i]).strip() for r in self.rows)]
        if len(keep) < len(self.headers):
            self.headers = [self.headers[i] for i in keep]
            self.rows = [[r[i] for i in keep] for r in self.rows]

    def add_row(self, *cells: Any) -> None:
        """Add one row (missing trailing cells are empty)."""
        row = [c if isinstance(c, Text) else Text("" if c is None else str(c)) for c in cells]
        self.rows.append(row + [Text("")] * (len(self.headers) - len(row)))

    # ------------------------------------------------------------ layout

    def _measure(self) -> tuple[list[int], list[int]]:
        nat, low = [], []
        for i, h in enumerate(self.headers):
            cells = [r[i] for r in self.rows]
            # A header wraps at its spaces; a cell's whole line is its natural width.
            nat.append(max([_natural(h)] + [_natural(c) for c in cells]) or 1)
            low.append(max([_longest_word(h)] + [_longest_word(c) for c in cells]) or 1)
            if h in self.shorten:
                low[-1] = min(nat[-1], max(SHORTEN_MIN, _longest_word(h)))
        return nat, low

    def _widths(self, cols: list[int], nat: list[int], low: list[int], width: int) -> list[int] | None:
        """Column widths for ``cols`` within ``width``, or None when even the words do not fit."""
        room = width - overhead(len(cols))
        if sum(nat[i] for i in cols) <= room:
            return [nat[i] for i in cols]
        if sum(low[i] for i in cols) > room:
            return None
        widths = {i: low[i] for i in cols}
        spare = room - sum(widths.values())
        # Key columns, then columns a few cells short of their full width, get it first (a row's
        # name and a header that needs 3 more cells stay on one line) ...
        for i in sorted(cols, key=lambda c: (c >= self.keys, nat[c] - low[c])):
            if i >= self.keys and nat[i] - widths[i] > SMALL_DEFICIT:
                continue
            give = min(spare, nat[i] - widths[i])
            widths[i] += give
            spare -= give
        # ... then the long (prose) columns share what is left in proportion to what they lack.
        need = {i: nat[i] - widths[i] for i in cols if nat[i] > widths[i]}
        total = sum(need.values())
        if total and spare:
            for i, n in need.items():
                widths[i] += min(n, spare * n // total)
        return [widths[i] for i in cols]

    def _chunks(self, nat: list[int], low: list[int], width: int) -> list[list[int]] | None:
        keys = list(range(self.keys))
        rest = list(range(self.keys, len(self.headers)))
        chunks: list[list[int]] = []
        cur = list(keys)
        for i in rest:
            if self._widths(cur + [i], nat, low, width) is not None:
                cur.append(i)
                continue
            if len(cur) == len(keys):
                return None  # not even the keys and this one column fit
            chunks.append(cur)
            cur = keys + [i]
            if self._widths(cur, nat, low, width) is None:
                return None
        chunks.append(cur)
        return chunks

    def _table(self, cols: list[int], widths: list[int], title: str | None) -> Table:
        t = Table(title=title, title_justify="left", title_style="bold", show_edge=False, header_style="bold")
        for i, w in zip(cols, widths):
            h = self.headers[i]
            cut = h in self.shorten
            t.add_column(h, width=w, overflow="ellipsis" if cut else "fold", no_wrap=cut,
                         justify=self.justify.get(h, "left"))  # type: ignore[arg-type]
        for r in self.rows:
            t.add_row(*(r[i] for i in cols))
        return t

    def layouts(self, width: int) -> list[Any]:
        """The renderables this table prints as at ``width`` cells (one table, several, or vertical text)."""
        self._drop_empty_optional()
        if not self.headers:
            return []
        nat, low = self._measure()
        # A row's name (the key columns) stays on one line when it takes at most a third of the width.
        klow = [nat[i] if i < self.keys and nat[i] <= width // 3 else low[i] for i in range(len(low))]
        allc = list(range(len(self.headers)))
        widths = self._widths(allc, nat, klow, width) or self._widths(allc, nat, low, width)
        if widths is not None:
            return [self._table(allc, widths, self.title)]
        chunks = None
        if len(self.headers) > 1:
            chunks = self._chunks(nat, klow, width)
            if chunks is None:
                chunks = self._chunks(nat, low, width)
            else:
                low = klow
        if chunks is not None:
            out: list[Any] = []
            for n, cols in enumerate(chunks):
                title = self.title if n == 0 else (f"{self.title} (continued)" if self.title else None)
                out.append(self._table(cols, self._widths(cols, nat, low, width) or [], title))
            return out
        return [self._vertical()]

    def _vertical(self) -> Text:
        t = Text()
        if self.title:
            t.append(self.title + "\n", style="bold")
        for n, r in enumerate(self.rows):
            if n:
                t.append("\n")
            for h, c in zip(self.headers, r):
                t.append(f"{h}: ", style="bold")
                t.append_text(c if isinstance(c, Text) else Text(str(c)))
                t.append("\n")
        t.rstrip()
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        items = self.layouts(options.max_width)
        for n, item in enumerate(items):
            if n:
                yield Text("")
            yield item

