"""Itanium C++ names (`_ZN5aiter24add_rmsnorm_quant_kernelI...`) demangled in one batch by the system's demangler.

CUPTI demangles most kernel names before Kineto writes them, but not all: ROCm traces keep AMD's kernels mangled,
and a name CUPTI could not read arrives as it was. `demangle(names)` hands every distinct mangled name of a run to
one `c++filt` (GNU binutils, the library behind `__cxa_demangle`'s rules) or `llvm-cxxfilt` process, one name a
line, and returns what it reads. A name the tool cannot read comes back unchanged and stays mangled; so do all of
them when no tool is installed, when it fails, or when it does not answer within TIMEOUT_S. A name longer than
MAX_MANGLED characters is not handed over (no real kernel name comes near it): the tool runs in its own process and
its time per name is bounded, so a hostile name costs neither the ingest's stack nor more than linear time here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable

TOOLS = ("c++filt", "llvm-cxxfilt")
MANGLED = re.compile(r"_Z[\w.$]+", re.ASCII)
MAX_MANGLED = 8192
TIMEOUT_S = 30.0


def demangle(names: Iterable[str]) -> dict[str, str]:
    """Mangled name -> its demangled name, for each name of `names` that the system's demangler reads."""
    mangled = sorted({n for n in names if len(n) <= MAX_MANGLED and MANGLED.fullmatch(n)})
    tool = next((path for path in map(shutil.which, TOOLS) if path), None)
    if not mangled or tool is None:
        return {}
    try:
        done = subprocess.run(
            [tool, "-n"],  # -n: no leading underscore is stripped (either tool)
            input="\n".join(mangled) + "\n",
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(mangled):
        return {}
    return {name: text for name, text in zip(mangled, lines, strict=True) if text != name}
