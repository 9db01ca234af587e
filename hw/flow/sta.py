"""Static timing over nextpnr's routed SDF: every register-to-register endpoint, worst first.

``python -m hw sta build/synth/ecp5/routed.sdf [--period NS] [--paths N] [--block PREFIX]``

nextpnr's report names one critical path per clock. To fix timing one needs the whole set of
failing endpoints, and ``make synth ... --sdf`` (``python -m hw synth --sdf``) writes the
routed delays of every cell and net as SDF. This reads them back as a timing graph:

- ``INTERCONNECT a/P b/Q`` is a net arc, ``IOPATH P Q`` of an instance a cell arc;
- an ``IOPATH`` from a clock pin (``CLK*``, ``WCK``, or an edge such as ``(posedge CLK)``)
  starts a path with its clock-to-output delay;
- a ``SETUPHOLD``/``SETUP`` check ends one, with its setup time (the first value, as
  nextpnr writes it).

Arrival times are the longest over all arcs, using the maximum of each (min:typ:max) triple.
One clock, single-cycle paths only; inputs and outputs (no start or check) are not timed.
For nextpnr-ecp5 SDF the worst endpoint matches nextpnr's own critical path to the ps.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from dataclasses import dataclass

__all__ = ["TimingGraph", "block_endpoints", "parse_sdf", "main"]

_TOKEN = re.compile(r'\(|\)|"[^"]*"|(?:\\.|[^\s()"])+')
_CLOCK_PIN = re.compile(r"CLK[A-Z0-9]*|WCK")
_UNITS = {"fs": 1e-6, "ps": 1e-3, "ns": 1.0, "us": 1e3}


def parse_sdf(text: str) -> list:
    """The SDF text as nested lists of tokens (strings keep their quotes)."""
    stack: list[list] = [[]]
    for match in _TOKEN.finditer(text):
        tok = match.group(0)
        if tok == "(":
            stack.append([])
        elif tok == ")":
            if len(stack) == 1:
                raise ValueError("unbalanced ')' in SDF")
            done = stack.pop()
            stack[-1].append(done)
        else:
            stack[-1].append(tok)
    if len(stack) != 1 or not stack[0] or stack[0][0][:1] != ["DELAYFILE"]:
        raise ValueError("not an SDF file (no balanced DELAYFILE)")
    return stack[0][0]


def _unescape(name: str) -> str:
    return re.sub(r"\\(.)", r"\1", name)


def _split_pin(ref: str) -> tuple[str, str]:
    """``inst/pin`` (``/`` inside names is escaped) -> (instance, pin)."""
    for i in range(len(ref) - 1, -1, -1):
        if ref[i] == "/" and (i == 0 or ref[i - 1] != "\\"):
            return _unescape(ref[:i]), ref[i + 1:]
    return "", ref


def _value(triple) -> float:
    """Largest number of an SDF value ``(min:typ:max)`` (or a single number); 0 if empty."""
    if isinstance(triple, list):
        triple = triple[0] if triple else ""
    nums = [float(p) for p in str(triple).split(":") if p]
    return max(nums) if nums else 0.0


@dataclass(frozen=True)
class Endpoint:
    arrival_ns: float      # data arrival plus setup
    instance: str
    pin: str
    path: tuple            # ((instance, pin, delay_ns, kind), ...) from the start; kind: clk/cell/net


class TimingGraph:
    """The routed timing graph of one SDF file."""

    def __init__(self, text: str):
        root = parse_sdf(text)
        scale = 1.0     # ns per SDF unit: the SDF default, unless TIMESCALE says otherwise
        self.fanin: dict = defaultdict(list)   # (inst, pin) -> [((inst, pin), delay, kind)]
        self.start: dict = {}                  # (inst, pin) -> clock-to-output delay
        self.setup: dict = {}                  # (inst, pin) -> setup time
        self.cell_type: dict = {}
        for item in root[1:]:
            if isinstance(item, list) and item and item[0] == "TIMESCALE":
                m = re.fullmatch(r"([\d.]+)\s*([a-z]+)", "".join(item[1:]))
                if not m or m.group(2) not in _UNITS:
                    raise ValueError(f"unknown SDF TIMESCALE {item[1:]}")
                scale = float(m.group(1)) * _UNITS[m.group(2)]
        for item in root[1:]:
            if not (isinstance(item, list) and item and item[0] == "CELL"):
                continue
            inst, ctype = "", ""
            for sub in item[1:]:
                if sub[0] == "CELLTYPE":
                    ctype = sub[1].strip('"')
                elif sub[0] == "INSTANCE":
                    inst = _unescape(sub[1]) if len(sub) > 1 else ""
            self.cell_type[inst] = ctype
            for sub in item[1:]:
                if sub[0] == "DELAY":
                    for block in sub[1:]:
                        for arc in block[1:]:
                            self._delay(inst, arc, scale)
                elif sub[0] == "TIMINGCHECK":
                    for chk in sub[1:]:
                        if chk[0] in ("SETUPHOLD", "SETUP"):
                            pin = chk[1][-1] if isinstance(chk[1], list) else chk[1]
                            key = (inst, pin)
                            self.setup[key] = max(self.setup.get(key, 0.0),
                                                  _value(chk[3]) * scale)
        self._arrival: dict = {}
        self._pred: dict = {}

    def _delay(self, inst, arc, scale):
        if arc[0] == "IOPATH":
            src, dst = arc[1], arc[2]
            d = max(_value(v) for v in arc[3:]) * scale
            if isinstance(src, list) or _CLOCK_PIN.fullmatch(src):
                key = (inst, dst)
                self.start[key] = max(self.start.get(key, 0.0), d)
            else:
                self.fanin[(inst, dst)].append(((inst, src), d, "cell"))
        elif arc[0] == "INTERCONNECT":
            d = max(_value(v) for v in arc[3:]) * scale
            self.fanin[_split_pin(arc[2])].append((_split_pin(arc[1]), d, "net"))

    def arrival(self, node) -> float:
        """Latest arrival at ``node`` from any clocked start; -inf if none reaches it.
        A combinational loop is cut at its back edge."""
        open_ = set()
        stack = [(node, False)]
        while stack:     # iterative depth-first search: netlists are deeper than the stack
            n, expanded = stack.pop()
            if n in self._arrival:
                continue
            if expanded:
                best, via = float("-inf"), None
                for src, d, kind in self.fanin.get(n, ()):
                    t = self._arrival.get(src, float("-inf")) + d   # back edge: -inf
                    if t > best:
                        best, via = t, (src, d, kind)
                self._arrival[n], self._pred[n] = best, via
                open_.discard(n)
                continue
            if n in open_:      # an ancestor on the current path: a loop
                continue
            if n in self.start:
                self._arrival[n], self._pred[n] = self.start[n], None
                continue
            open_.add(n)
            stack.append((n, True))
            stack.extend((src, False) for src, _, _ in self.fanin.get(n, ())
                         if src not in self._arrival and src not in open_)
        return self._arrival[node]

    def endpoints(self, starts=None, ends=None) -> list[Endpoint]:
        """Every timed endpoint, latest first. ``starts`` / ``ends``, if given, are predicates
        on instance names: only paths from start instances with ``starts(name)`` true are
        timed, and only endpoints with ``ends(name)`` true are listed."""
        if starts is not None:
            saved = self.start, self._arrival, self._pred
            self.start = {k: v for k, v in self.start.items() if starts(k[0])}
            self._arrival, self._pred = {}, {}
            try:
                return self.endpoints(ends=ends)
            finally:
                self.start, self._arrival, self._pred = saved
        out = []
        for node, su in self.setup.items():
            if ends is not None and not ends(node[0]):
                continue
            a = self.arrival(node)
            if a == float("-inf"):
                continue
            path, n = [], node
            while n is not None:
                via = self._pred.get(n)
                if via is None:
                    path.append((n[0], n[1], self.start.get(n, 0.0), "clk"))
                    n = None
                else:
                    path.append((n[0], n[1], via[1], via[2]))
                    n = via[0]
            out.append(Endpoint(a + su, node[0], node[1], tuple(reversed(path))))
        out.sort(key=lambda e: -e.arrival_ns)
        return out


def block_endpoints(graph: TimingGraph, prefix: str) -> list[Endpoint]:
    """The endpoints of every path that starts or ends in instances named ``prefix...`` (a
    block inside a wrapper): paths that start and end outside it are not timed. Latest
    first."""
    inside = lambda name: name.startswith(prefix)
    eps = graph.endpoints(ends=inside)
    eps += graph.endpoints(starts=inside, ends=lambda name: not inside(name))
    eps.sort(key=lambda e: -e.arrival_ns)
    return eps


def _family(name: str) -> str:
    """A cell name without the suffixes synthesis and packing add (groups a bus)."""
    return re.sub(r"(_TRELLIS_|_LUT4|_CCU2C|\$|\.\d).*$", "", name)


def format_endpoints(eps: list[Endpoint], period_ns: float, paths: int, types=None) -> str:
    lines = []
    failing = [e for e in eps if e.arrival_ns > period_ns]
    worst = eps[0].arrival_ns if eps else 0.0
    lines.append(f"{len(eps)} timed endpoints; {len(failing)} over {period_ns:g} ns; worst "
                 f"{worst:.3f} ns ({1000 / worst if worst else float('inf'):.1f} MHz)")
    seen, shown = set(), 0
    for e in eps:
        if shown >= paths:
            break
        key = (_family(e.path[0][0]), _family(e.instance))
        if key in seen:     # one line per source/destination group (a bus, an array)
            continue
        seen.add(key)
        shown += 1
        route = sum(d for _, _, d, kind in e.path if kind == "net")
        logic = sum(1 for _, _, _, kind in e.path if kind == "cell")
        lines.append(f"\n{e.arrival_ns:7.3f} ns  slack {period_ns - e.arrival_ns:+.3f}  "
                     f"({logic} cell arcs, {route:.2f} ns route)")
        t = 0.0
        for inst, pin, d, kind in e.path:
            t += d
            if kind != "net":
                ct = (types or {}).get(inst, "")
                lines.append(f"   {t:7.3f}  {kind:4s} {ct:13s} {inst}.{pin}")
        lines.append(f"   {e.arrival_ns:7.3f}  end  {e.instance}.{e.pin}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m hw sta", description=__doc__.split("\n")[0])
    ap.add_argument("sdf", help="routed SDF (python -m hw synth --sdf writes routed.sdf)")
    ap.add_argument("--period", type=float, default=10.0, help="clock period in ns (10)")
    ap.add_argument("--paths", type=int, default=20,
                    help="paths to print, one per source/destination group (20)")
    ap.add_argument("--block", metavar="PREFIX",
                    help="time only paths that start or end in instances named PREFIX... "
                    "(for the synthesis wrapper: --block top. leaves out the paths inside "
                    "the wrapper)")
    args = ap.parse_args(argv)
    if not args.period > 0:
        print(f"error: --period must be > 0 ns, not {args.period:g}", file=sys.stderr)
        return 2
    try:
        with open(args.sdf) as f:
            graph = TimingGraph(f.read())
    except (OSError, ValueError) as e:
        print(f"error: {args.sdf}: {e}", file=sys.stderr)
        return 2
    eps = block_endpoints(graph, args.block) if args.block else graph.endpoints()
    print(format_endpoints(eps, args.period, args.paths, graph.cell_type))
    return 0

