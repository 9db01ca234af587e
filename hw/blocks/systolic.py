"""Output-stationary systolic array with input skew and row-by-row output de-skew."""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from hw.blocks.pe import ProcessingElement

__all__ = ["SystolicArray"]


class SystolicArray(wiring.Component):
    """``rows`` x ``cols`` grid of :class:`~hw.blocks.pe.ProcessingElement` computing one output tile.

    Dataflow: output-stationary. PE ``(r, c)`` owns output element ``(r, c)`` of the current
    tile and accumulates ``sum_k a[r, k] * b[k, c]`` in place; A rows flow east, B columns flow
    south. Attention's products all have a short output dimension pair and a reduction length
    that varies at run time (``d_k`` for Q.K^T, ``kv_len`` for P.V, ``d_model`` for the
    projections): keeping the sum in place means K can be anything from 1 up without
    re-loading the array, partial sums never leave a PE (no wide psum traffic), and only
    ``rows + cols`` narrow operands enter per step. Weight-stationary would need a pre-load of
    a K x C block and move acc_width partial sums through every PE each step.

    Each step the array takes one beat: ``a`` = column ``k`` of the A tile (one value per
    row), ``b`` = row ``k`` of the B tile (one value per column) and flags marking the tile's
    first and last ``k``. The input skew delays row ``r`` of A (and its flags) by ``r`` steps
    and column ``c`` of B by ``c`` steps, so ``a[r, k]`` meets ``b[k, c]`` in PE ``(r, c)``.
    When the ``last`` flag leaves the east edge of row ``r``, every PE of that row holds its
    result; the de-skew reads that row into ``row_data`` one step later. Rows of a tile thus
    emerge in order, one per step, and the next tile accumulates meanwhile.

    Parameters
    ----------
    rows, cols : int
        Array size, 2..16 each.
    a_width, b_width : int
        Signed operand widths (2..18).
    acc_width : int
        Signed accumulator width; sums wrap modulo ``2**acc_width``.

    Members
    -------
    en : In(1)
        Step enable: every register of the array advances only when it is high.
    valid : In(1)
        The step's beat is real; low for a bubble, whose ``a``/``b`` are ignored (they enter
        the PEs as zeros, so a bubble adds nothing to any sum).
    a : In(ArrayLayout(signed(a_width), rows))
        Column ``k`` of the A tile.
    b : In(ArrayLayout(signed(b_width), cols))
        Row ``k`` of the B tile.
    first, last : In(1)
        The beat is the tile's first / last (both for K = 1); low for a bubble.
    row_valid : Out(1)
        ``row_data`` holds a finished row this step.
    row_index : Out(range(rows))
        Which row of the tile.
    row_data : Out(ArrayLayout(signed(acc_width), cols))
        The finished sums of that row.
    row_ready : Out(rows)
        One-hot (or zero): the row that enters ``row_data`` at the next enabled step (a
        register output, for a controller that plans a step ahead).

    Latency: the ``last`` beat of a tile, taken in step ``s``, gives row ``r`` in ``row_data``
    in step ``s + latency + r`` (``latency = cols + 5``: input register, ``cols`` PEs, the PE's
    product pipeline and result register, row read), counting enabled steps only.
    Throughput: one beat per step. Consecutive ``last`` beats must be at least
    ``min_tile_steps = max(rows, cols)`` steps apart: the spacing keeps two tiles' rows from
    finishing in the same step and a ``result`` register from being overwritten before its
    row is read.
    """

    @staticmethod
    def check(rows: int, cols: int, a_width: int, b_width: int, acc_width: int) -> None:
        """Raise ``ValueError`` naming the first parameter out of range."""
        for name, value in (("rows", rows), ("cols", cols)):
            if isinstance(value, bool) or not isinstance(value, int) or not 2 <= value <= 16:
                raise ValueError(f"{name} = {value!r} is out of range: allowed integers 2..16")
        ProcessingElement.check_widths(a_width, b_width, acc_width)

    def __init__(self, rows: int, cols: int, a_width: int, b_width: int, acc_width: int):
        self.check(rows, cols, a_width, b_width, acc_width)
        self.rows, self.cols = rows, cols
        self.a_width, self.b_width, self.acc_width = a_width, b_width, acc_width
        super().__init__({
            "en": In(1),
            "valid": In(1),
            "a": In(data.ArrayLayout(signed(a_width), rows)),
            "b": In(data.ArrayLayout(signed(b_width), cols)),
            "first": In(1),
            "last": In(1),
            "row_valid": Out(1),
            "row_index": Out(range(rows)),
            "row_data": Out(data.ArrayLayout(signed(acc_width), cols)),
            "row_ready": Out(rows),
        })

    @property
    def latency(self) -> int:
        """Steps from a tile's ``last`` beat at the inputs to its row 0 in ``row_data``."""
        return self.cols + 5

    @property
    def min_tile_steps(self) -> int:
        """Smallest allowed number of steps between two ``last`` beats."""
        return max(self.rows, self.cols)

    def elaborate(self, platform):
        m = Module()
        R, C = self.rows, self.cols
        en = self.en

        # Input register, then the skew: row r of A and its flags wait r more steps,
        # column c of B waits c more steps. The operands are registered as they come; a
        # bubble's are replaced by zeros where they leave the skew (valid_skew[i] is the valid
        # flag delayed i + 1 steps), so the controller's valid fans out to a few flags only.
        # Operand registers without reset (a bubble's are zeroed by valid_skew; see the PE).
        a_skew = [[Signal(signed(self.a_width), name=f"a_skew_{r}_{i}", reset_less=True)
                   for i in range(r + 1)]
                  for r in range(R)]
        b_skew = [[Signal(signed(self.b_width), name=f"b_skew_{c}_{i}", reset_less=True)
                   for i in range(c + 1)]
                  for c in range(C)]
        valid_skew = [Signal(name=f"valid_skew_{i}") for i in range(max(R, C))]
        first_skew = [Signal(name=f"first_skew_{i}") for i in range(R)]
        last_skew = [Signal(name=f"last_skew_{i}") for i in range(R)]
        with m.If(en):
            for r in range(R):
                m.d.sync += a_skew[r][0].eq(self.a[r])
                m.d.sync += [a_skew[r][i].eq(a_skew[r][i - 1]) for i in range(1, r + 1)]
            for c in range(C):
                m.d.sync += b_skew[c][0].eq(self.b[c])
                m.d.sync += [b_skew[c][i].eq(b_skew[c][i - 1]) for i in range(1, c + 1)]
            m.d.sync += [first_skew[0].eq(self.first), last_skew[0].eq(self.last),
                         valid_skew[0].eq(self.valid)]
            m.d.sync += [valid_skew[i].eq(valid_skew[i - 1]) for i in range(1, len(valid_skew))]
            m.d.sync += [first_skew[i].eq(first_skew[i - 1]) for i in range(1, R)]
            m.d.sync += [last_skew[i].eq(last_skew[i - 1]) for i in range(1, R)]

        pes = [[ProcessingElement(self.a_width, self.b_width, self.acc_width)
                for _ in range(C)] for _ in range(R)]
        for r in range(R):
            for c in range(C):
                pe = pes[r][c]
                m.submodules[f"pe_{r}_{c}"] = pe
                m.d.comb += pe.en.eq(en)
                if c == 0:
                    m.d.comb += [pe.a_in.eq(Mux(valid_skew[r], a_skew[r][r], 0)),
                                 pe.first_in.eq(first_skew[r]),
                                 pe.last_in.eq(last_skew[r])]
                else:
                    west = pes[r][c - 1]
                    m.d.comb += [pe.a_in.eq(west.a_out), pe.first_in.eq(west.first_out),
                                 pe.last_in.eq(west.last_out)]
                if r == 0:
                    m.d.comb += pe.b_in.eq(Mux(valid_skew[c], b_skew[c][c], 0))
                else:
                    m.d.comb += pe.b_in.eq(pes[r - 1][c].b_out)

        # De-skew: row r is complete when its east PE's last_done is high (the last flag has
        # crossed the row and that PE's result register holds the sum). The tile spacing makes
        # at most one row ready per step, so an AND-OR select suffices.
        ready = self.row_ready
        m.d.comb += ready.eq(Cat(*(pes[r][C - 1].last_done for r in range(R))))
        row_data = Signal.like(self.row_data, reset_less=True)
        m.d.comb += self.row_data.eq(row_data)
        with m.If(en):
            m.d.sync += self.row_valid.eq(ready.any())
            for c in range(C):
                selected = 0
                for r in range(R):
                    selected = selected | Mux(ready[r], pes[r][c].result.as_unsigned(), 0)
                m.d.sync += row_data[c].eq(selected)
            index = 0
            for r in range(1, R):
                index = index | (ready[r] * r)
            m.d.sync += self.row_index.eq(index)
        return m
