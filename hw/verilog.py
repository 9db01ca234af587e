"""Verilog generation shared by every block: Amaranth -> Verilog, made simulator-safe.

``to_verilog`` converts a component and applies one fix: Yosys's time-0 trigger register
(``reg \\$auto$verilog_backend... = 0;``) becomes an ``initial #0`` assignment, so Icarus runs
every ``always @*`` block once at time 0 instead of leaving outputs at X (amaranth #594; see
docs/toolchain notes). Verilator then needs ``--no-timing``. Absolute source paths in ``src``
attributes are made relative to the repository, so the output does not depend on the checkout.
"""

from __future__ import annotations

import re
from pathlib import Path

from amaranth.back import verilog

__all__ = ["to_verilog", "write_verilog", "REPO_ROOT"]

REPO_ROOT = Path(__file__).resolve().parent.parent

_TRIGGER = re.compile(r"reg (\\\$auto\$verilog_backend\S*) += 0;")


def to_verilog(component, name: str) -> str:
    """Verilog text of ``component`` as module ``name``, with the Icarus time-0 fix applied."""
    text = verilog.convert(component, name=name, emit_src=True)
    text = _TRIGGER.sub(lambda m: f"reg {m.group(1)} ;\n  initial #0 {m.group(1)} = 1'b0;", text)
    site = str(Path(verilog.__file__).resolve().parent.parent.parent)
    return text.replace(str(REPO_ROOT) + "/", "").replace(site + "/", "")


def write_verilog(component, name: str, path: str | Path) -> Path:
    """Write ``to_verilog(component, name)`` to ``path`` unless it already holds that text."""
    path = Path(path)
    text = to_verilog(component, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)
    return path
