"""Matplotlib's figures, from inside the run: every figure shown with ``plt.show()`` and every one
still open when the code ends, rendered once to PNG within the call's budgets.

Standard library only: matplotlib is touched only once the code itself has imported
``matplotlib.pyplot`` (in a preloading zygote it already has been, and the patch is made at once).
A figure too large for the budgets is rendered again at a lower dpi, or left out with a note; the
code never sees an error of ours.
"""

from __future__ import annotations

import io
import math
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import ModuleType
    from typing import Any

MIN_DPI = 10
PNG_ATTEMPTS = 3


class Rendered:
    """One figure as it comes back: a PNG, or why it does not (its size in pixels is the server's
    to read from the PNG: nothing the run says about it is trusted)."""

    __slots__ = ("full", "name", "note", "png")

    def __init__(self, name: str, png: bytes | None, note: str, full: bytes | None = None) -> None:
        # `full`: the render at full size (within the pixel cap) when `png` is a smaller one, or none
        # fits the image budget; the server keeps it and links it where it keeps anything.
        self.name, self.png, self.note, self.full = name, png, note, full


class Figures:
    """The figures of one run. `install` before the code; `finish` after it.

    Rendering a 20,000 x 20,000 px figure would need 1.6 GB of pixels: a figure is drawn at a dpi that
    keeps it within `max_pixels` (`images.MAX_PIXELS`), whatever the budgets say.
    """

    def __init__(self, max_images: int, max_image_bytes: int, max_pixels: int, keep_open: bool = False) -> None:
        self.max_images = max_images
        # A session's call: the figures it leaves open stay open for the next call (and come back
        # once, from the call that made them); those an earlier call left are not drawn again.
        self.keep_open = keep_open
        self._earlier: list[Any] = []
        self.max_image_bytes = max_image_bytes
        self.max_pixels = max_pixels
        self.rendered: list[Rendered] = []
        self.left_out = 0  # figures past max_images, closed unrendered
        self._pyplot: ModuleType | None = None

    def install(self) -> None:
        """Render figures at ``plt.show()``: now if pyplot is loaded, else when the code imports it."""
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None and self.keep_open:
            self._earlier = _open_figures()
        if pyplot is not None:
            if self.max_images > 0:
                self._patch(pyplot)
        elif "matplotlib" not in sys.modules or self.max_images > 0:
            sys.meta_path.insert(0, _MatplotlibFinder(self._patch if self.max_images > 0 else None))

    def finish(self) -> list[Rendered]:
        """Render what is still open (but figures the code saved to a file itself, and never showed);
        what was left out past the budget comes last, as one note."""
        if self._pyplot is not None:
            self._take_open(skip_saved=True, keep=self.keep_open)
        if not self.left_out:
            return self.rendered
        more = f"{self.left_out:,} more figure{'s' if self.left_out > 1 else ''}"
        plural = "s" if self.max_images != 1 else ""
        return [*self.rendered, Rendered(more, None, f"more than {self.max_images} image{plural} in one call")]

    def _patch(self, pyplot: ModuleType) -> None:
        self._pyplot = pyplot

        def show(*args: object, **kwargs: object) -> None:
            """Shows every open figure: it comes back as an image with the call's result."""
            self._take_open(skip_saved=False)

        pyplot.show = show  # type: ignore[attr-defined]
        figure_class = sys.modules["matplotlib.figure"].Figure
        if not getattr(figure_class, "_runner_marks_saves", False):
            original = figure_class.savefig

            def savefig(figure: Any, *args: object, **kwargs: object) -> object:
                figure._runner_saved = True
                return original(figure, *args, **kwargs)

            savefig.__doc__ = original.__doc__
            figure_class.savefig = savefig
            figure_class._runner_marks_saves = True

    def _take_open(self, skip_saved: bool, keep: bool = False) -> None:
        pyplot = self._pyplot
        assert pyplot is not None
        every = _open_figures()
        wanted = [figure for figure in every if not (skip_saved and getattr(figure, "_runner_saved", False))]
        if keep:  # a session call's end: draw what it made, and close nothing
            new = [figure for figure in wanted if not any(figure is old for old in self._earlier)]
            room = max(0, self.max_images - sum(1 for done in self.rendered if done.png is not None))
            self.left_out += max(0, len(new) - room)
            for figure in new[:room]:
                self.rendered.append(self._render(figure, f"figure-{len(self.rendered) + 1}.png"))
            return
        room = max(0, self.max_images - sum(1 for done in self.rendered if done.png is not None))
        shown = wanted[:room]
        self.left_out += len(wanted) - len(shown)
        # The rest are closed first, never drawn: a run that used up its memory holding a thousand of
        # them has room to draw the few that come back once the others are gone.
        for figure in every:
            if not any(figure is kept for kept in shown):
                _close(pyplot, figure)
        if len(every) > len(shown):
            import gc  # figures hold reference cycles: their memory comes back only when collected

            del every, wanted
            gc.collect()
        for figure in shown:
            self.rendered.append(self._render(figure, f"figure-{len(self.rendered) + 1}.png"))
            _close(pyplot, figure)

    def _render(self, figure: Any, name: str) -> Rendered:
        try:
            width_in, height_in = (float(x) for x in figure.get_size_inches())
            dpi = float(figure.dpi)
            full = (round(width_in * dpi), round(height_in * dpi))
            note = ""
            if full[0] * full[1] > self.max_pixels:
                dpi *= math.sqrt(self.max_pixels / (full[0] * full[1]))
                note = f"{full[0]}x{full[1]} px at full size: rendered at dpi {dpi:.0f}"
            first: bytes | None = None
            for _ in range(PNG_ATTEMPTS):
                if dpi < MIN_DPI:
                    break
                buffer = io.BytesIO()
                figure.savefig(buffer, format="png", dpi=dpi)
                png = buffer.getvalue()
                if len(png) <= self.max_image_bytes:
                    return Rendered(name, png, note, first)
                first = first or png
                dpi *= max(0.3, 0.9 * math.sqrt(self.max_image_bytes / len(png)))
                note = f"{full[0]}x{full[1]} px at full size: rendered at dpi {dpi:.0f} to fit the image budget"
            reason = f"over the {self.max_image_bytes:,}-byte image budget even at a low dpi"
            return Rendered(name, None, reason, first)
        except Exception as exc:
            return Rendered(name, None, f"could not be rendered: {_describe(exc)}")


def private_config(place: str | None = None) -> None:
    """Point MPLCONFIGDIR at a directory of the run's own (or at `place`) when the shared one (the
    package environment's, with its font cache built at install) is read-only, as in a sandbox.

    matplotlib refuses a read-only one: it would make a temporary directory in the run's own, build
    its font cache there (over a second) and say so on stderr, in every run. The run's directory
    gets links to the shared cache instead: in the sandbox's private /run, or, where that cannot be
    written, in ``.matplotlib`` of the working directory (which never comes back as a file).
    """
    shared = os.environ.get("MPLCONFIGDIR", "")
    if not shared or os.access(shared, os.W_OK):
        return
    try:
        if place is None:
            on_run = os.access("/run", os.W_OK)
            place = "/run/matplotlib" if on_run else os.path.join(os.getcwd(), ".matplotlib")
        os.makedirs(place, mode=0o700, exist_ok=True)
        for name in os.listdir(shared):
            if name.endswith(".json") and not os.path.lexists(os.path.join(place, name)):
                os.symlink(os.path.join(shared, name), os.path.join(place, name))
    except OSError:
        return  # matplotlib's own way, slower
    os.environ["MPLCONFIGDIR"] = place


def _open_figures() -> list[Any]:
    """The figures pyplot holds open, oldest first."""
    try:
        managers = sys.modules["matplotlib._pylab_helpers"].Gcf.get_all_fig_managers()
        return [manager.canvas.figure for manager in managers]
    except Exception:
        return []


def _close(pyplot: ModuleType, figure: Any) -> None:
    import contextlib  # only once matplotlib is in use (and has loaded it)

    with contextlib.suppress(Exception):  # a figure the code broke: it is gone from our list anyway
        pyplot.close(figure)


def _describe(exc: BaseException) -> str:
    try:
        return f"{type(exc).__name__}: {exc}"[:300]
    except Exception:
        return type(exc).__name__


class _MatplotlibFinder:
    """Lets the imports of ``matplotlib`` and ``matplotlib.pyplot`` happen as usual, but first gives
    matplotlib a cache directory it can use, and then hands pyplot to `on_import` (if any)."""

    def __init__(self, on_import: Any) -> None:
        self._on_import = on_import

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name == "matplotlib":
            private_config()
            return None
        if name != "matplotlib.pyplot" or self._on_import is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                _call_after(spec.loader, self._on_import)
                return spec
        return None


def _call_after(loader: Any, on_import: Any) -> None:
    """Make `loader` hand the module it has run to `on_import`."""
    original = loader.exec_module

    def exec_module(module: ModuleType) -> None:
        original(module)
        on_import(module)

    loader.exec_module = exec_module
