"""Cycle model of the additive scorer (:class:`hw.blocks.additive.AdditiveScorer`).

The scorer's timing is a handful of registers (the command register, the held beat and its
group counter, the term stages, the output bank), so the model steps exactly those, one
cycle at a time, by the same rules as the hardware: it is exact (``tests/test_additive_unit.py``
compares every result beat's cycle) and takes microseconds per tile.
"""

from __future__ import annotations

__all__ = ["fill_cycles", "scorer_cycles", "groups_per_beat"]


def groups_per_beat(rows: int, cols: int, lanes: int) -> int:
    """Cycles per operand beat: the tile's ``rows * cols`` terms over ``lanes`` lanes."""
    return -(-rows * cols // lanes)


def fill_cycles() -> int:
    """Cycles from the ``fill`` strobe to ``filling`` low (the strobe's cycle included): the
    table's entries one per cycle, then the rounding and saturation (``FILL_STAGES``) and the
    tanh unit."""
    from hw.blocks.additive import Z_CODES, AdditiveScorer
    from hw.blocks.tanh import TanhUnit
    return 1 + Z_CODES + AdditiveScorer.FILL_STAGES + TanhUnit.LATENCY


def scorer_cycles(rows: int, cols: int, lanes: int, shapes) -> list[int]:
    """The cycle of every result beat of the products ``shapes`` (``(m, n, k)`` each, issued
    back to back: every command waiting when the previous one's last beat is taken), counted
    from the cycle the first operand beat is taken, with operands always valid and
    ``result`` always ready."""
    R, C = rows, cols
    G = groups_per_beat(R, C, lanes)
    # Per command, the beats: (last beat of its tile, rows of the tile) per beat.
    cmds = []
    for m, n, k in shapes:
        beats = []
        for tm in range(-(-m // R)):
            for _ in range(-(-n // C)):
                rows_t = min(R, m - tm * R)
                beats += [(kk == k - 1, rows_t) for kk in range(k)]
        cmds.append(beats)
    out: list[int] = []
    busy, ci, bi = True, 0, 0          # command register full, command and beat index
    held = None                        # the held beat
    p = 0
    from hw.blocks.additive import AdditiveScorer
    stages = [None] * AdditiveScorer.TERM_STAGES     # (group, last beat, rows) per stage
    bank_rows = 0                      # rows left in the output bank
    cycle = 0
    total = sum(len(c) for c in cmds)
    rows_left = sum(rows_t for beats in cmds for last, rows_t in beats if last)
    taken = 0
    while rows_left:
        last = stages[-1]
        final = last is not None and last[1] and last[0] == G - 1
        en = not (final and bank_rows)
        issue = held is not None and en
        frees = held is None or (issue and p == G - 1)
        take = busy and frees and taken < total
        cmd_take = not busy and ci < len(cmds)
        # outputs of this cycle
        if bank_rows:
            out.append(cycle + 1)          # through the result's register slice
            rows_left -= 1
        # the next state
        nxt_bank = bank_rows - 1 if bank_rows else 0
        if en and final:
            nxt_bank = last[2]
        if en:
            stages = [(p, held[0], held[1]) if issue else None] + stages[:-1]
        if issue:
            p = 0 if p == G - 1 else p + 1
            if p == 0:
                held = None
        if take:
            held, p = cmds[ci][bi], 0
            taken += 1
            bi += 1
            if bi == len(cmds[ci]):
                busy, ci, bi = False, ci + 1, 0
        elif cmd_take:
            busy = True
        bank_rows = nxt_bank
        cycle += 1
    return out
