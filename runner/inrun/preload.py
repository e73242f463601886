"""A preloading zygote's part: the package environment's heavy modules imported and warmed once,
before the first fork, so that a run that imports them finds them loaded; and what every forked run
must not share with its siblings, made anew.

Standard library only (imported by `zygote.py` from its own directory). The zygote stays single
threaded: numeric libraries are told so by the environment before they load (`spawn`), and a fork
server must never fork a process with more than one thread.
"""

from __future__ import annotations

import gc
import importlib
import io
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

PRELOAD_VARIABLE = "RUNNER_ZYGOTE_PRELOAD"


def requested() -> list[str]:
    """The modules the server asked this zygote to preload (and the variable gone from what runs see)."""
    return [name for name in os.environ.pop(PRELOAD_VARIABLE, "").split(",") if name]


def limits_after(
    scratch: str, limits: list[int], add_packages: Callable[[], None], private_config: Callable[[str], None]
) -> list[int]:
    """A preloading zygote (`requested`) imports and warms its modules; a run of it may then allocate
    RUNNER_MAX_MEMORY_MB on top of what they map (its RLIMIT_AS, limits[1], grows by that). Any other
    zygote's limits stay as they are. `add_packages` puts the package environment on sys.path."""
    names = requested()
    if not names:
        return limits
    add_packages()
    mapped = preload(names, scratch, private_config)
    if threads() != 1:
        raise RuntimeError(f"preloading {','.join(names)} started {threads()} threads; a fork server needs one")
    return [limits[0], limits[1] + mapped, *limits[2:]]


def preload(names: list[str], scratch: str, private_config: Callable[[str], None]) -> int:
    """Import and warm `names`; return the address space mapped then (VmSize, bytes).

    `scratch` is a writable directory of the zygote's where matplotlib may keep its configuration
    when the package environment's is read-only (`figures.private_config`, given as `private_config`).
    """
    shared_config = os.environ.get("MPLCONFIGDIR")
    if any(name.split(".")[0] == "matplotlib" for name in names):
        private_config(os.path.join(scratch, ".zygote-matplotlib"))
    for name in names:
        importlib.import_module(name)
    _warm()
    if shared_config is not None:
        os.environ["MPLCONFIGDIR"] = shared_config  # what a run's own programs should use
    # Everything loaded so far lives as long as the zygote: out of the collector's sight, so that no
    # collection in a run writes to (and copies) the pages it shares with the zygote.
    gc.collect()
    gc.freeze()
    return vm_size()


def _warm() -> None:
    """What a first use costs once per process: pandas' lazy imports and formatting, matplotlib's
    font lookup and a first PNG."""
    pandas = sys.modules.get("pandas")
    if pandas is not None:
        frame = pandas.DataFrame({"a": [1.0, 2.0], "b": ["x", "y"]})
        repr(frame.describe())
        repr(frame)
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        figure = pyplot.figure()
        pyplot.plot([0, 1], [0, 1], label="warm")
        pyplot.legend()
        pyplot.title("warm")
        figure.savefig(io.BytesIO(), format="png")
        if pandas is not None:  # pandas' plotting backend loads at its first plot
            pandas.DataFrame({"x": [1, 2], "y": [3.0, 4.0]}).plot(x="x", y="y", title="warm")
        pyplot.close("all")


def vm_size() -> int:
    """This process's mapped address space in bytes (Linux); 0 where /proc cannot tell."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def threads() -> int:
    """This process's thread count (Linux); 1 where /proc cannot tell."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def reseed() -> None:
    """In a forked run: randomness of its own. A fork copies the zygote's generators, so without this
    every run of a zygote would draw the same numbers from `random` and `numpy.random`."""
    random = sys.modules.get("random")
    if random is not None:
        random.seed()
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()
