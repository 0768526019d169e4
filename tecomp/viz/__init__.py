"""Pictures of kernels: where a kernel stands against this machine's roofs
(:func:`roofline`) and a schedule's loop nest against its caches
(:func:`draw_schedule`); the roofs themselves (:func:`host_peaks`).  The pictures need
matplotlib (``pip install matplotlib``), the HTML drawing nothing."""
from .loopnest import LoopNest, draw_schedule
from .peaks import STREAM_BYTES, dot_peak, fma_peak, host_peaks, stream_bandwidth
from .roofline import Roofline, plot_rooflines, roofline

__all__ = ["LoopNest", "Roofline", "STREAM_BYTES", "dot_peak", "draw_schedule", "fma_peak",
           "host_peaks", "plot_rooflines", "roofline", "stream_bandwidth"]
