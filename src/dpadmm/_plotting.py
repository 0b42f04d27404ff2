"""Small matplotlib helpers shared by the figures: readable log axes, legends outside the data.

Every figure the CLI writes goes through these so that a reader can read it: log axes get a
tick label at 1, 2 and 5 × each decade (plain numbers, not 10^k only), legends sit outside the
plotting area, and titles carry the dataset and settings.
"""

from __future__ import annotations

import numpy as np


def plt():
    """``matplotlib.pyplot`` on the non-interactive Agg backend (imported lazily)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    return pyplot


def _fmt(v, _pos=None) -> str:
    if v == 0:
        return "0"
    return f"{v:g}" if 1e-4 <= abs(v) < 1e5 else f"{v:.0e}".replace("e-0", "e-").replace("e+0", "e")


def readable_log(ax, which: str = "y") -> None:
    """Log scale on ``which`` ("x", "y" or "xy") with labelled ticks at 1, 2, 5 per decade.

    If the data span less than a decade, more intermediate ticks are labelled (1–9 per decade).
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    for axis_name in which:
        axis = ax.yaxis if axis_name == "y" else ax.xaxis
        (ax.set_yscale if axis_name == "y" else ax.set_xscale)("log")
        lo, hi = (ax.get_ylim() if axis_name == "y" else ax.get_xlim())
        span = hi / lo if lo > 0 else 100.0
        if span > 1e4:
            subs = (1.0,)
        elif span > 8:
            subs = (1.0, 2.0, 5.0)
        elif span > 3:
            subs = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
        else:  # less than half a decade: a tick every 0.05 (×10^k) so that several are labelled
            subs = tuple(float(v) for v in np.arange(1.0, 10.0, 0.5))
        axis.set_major_locator(LogLocator(base=10.0, subs=subs, numticks=30))
        axis.set_major_formatter(FuncFormatter(_fmt))
        axis.set_minor_locator(LogLocator(base=10.0, subs=tuple(range(1, 10)), numticks=30))
        axis.set_minor_formatter(NullFormatter())


def legend_outside(ax, *, where: str = "right", fontsize: float = 8, **kw):
    """A legend outside the axes (right of it, or below it) so it never hides a curve."""
    if where == "below":
        return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), fontsize=fontsize, frameon=False,
                         ncol=kw.pop("ncol", 2), **kw)
    return ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=fontsize, frameon=False,
                     borderaxespad=0.0, **kw)


def save(fig, path, dpi: int = 120) -> None:
    """Save with a tight bounding box (legends outside the axes are kept) and close."""
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    plt().close(fig)
