"""What ``solve`` shows while it trains.

By default: a header line, one live progress bar (tqdm; ``tqdm.auto`` in a notebook) on
stderr with the stage, step, loss terms, the error against the reference when known,
steps/s, elapsed time and ETA, and one summary line (error and the wall time). When stderr
is not a terminal (a log file, CI) the bar is replaced by a few plain lines (about one per
10% of the run), so no carriage returns reach the log. ``verbose=True`` prints the
per-interval table instead of the bar. Lines go through the ``sciml.pinn`` logger
(``logging.getLogger("sciml").setLevel(logging.WARNING)`` silences them); ``progress=False``
shows nothing.
"""
import math
import sys

from .._log import get_logger

log = get_logger("pinn")


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _in_notebook():
    try:
        from IPython import get_ipython
        shell = get_ipython()
    except Exception:
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def _short(terms, names):
    return " ".join(f"{n}={float(t):.2e}" for n, t in zip(names, terms))


class Console:
    """Header, bar or table, and summary of one run (under MPI only rank 0 shows them).

    Args:
        total: the run's total steps (all stages).
        names: loss-term names.
        show: False shows nothing.
        verbose: the per-interval table instead of the bar.
    """

    def __init__(self, total, names, *, show=True, verbose=False):
        self.total, self.names, self.show, self.verbose = int(total), list(names), show, verbose
        self.bar = None
        self.plain = show and not verbose and not (_isatty(sys.stderr) or _in_notebook())
        self._next_plain = 0
        self._done = 0
        self._err = float("nan")

    def header(self, text):
        if self.show:
            log.info(text)

    def start(self, done):
        """Open the bar at ``done`` steps (a resumed run starts part-way)."""
        self._done = done
        if not self.show or self.verbose or self.plain:
            self._next_plain = done + max(1, self.total // 10)
            return
        from tqdm.auto import tqdm
        import shutil
        width = shutil.get_terminal_size((0, 0)).columns or 120   # a terminal without a size
        self.bar = tqdm(total=self.total, initial=done, file=sys.stderr, ncols=width,
                        unit="step", leave=True, smoothing=0.1,
                        bar_format="{desc} {percentage:3.0f}%|{bar:12}| {n_fmt}/{total_fmt} "
                                   "[{elapsed}<{remaining}, {rate_fmt}] {postfix}")

    def update(self, n, *, stage, k, steps, value, terms, err, rate, extra=None):
        """Advance by ``n`` steps; ``k`` of ``steps`` in stage ``stage`` (its label)."""
        if not self.show:
            return
        if math.isfinite(err):
            self._err = err            # the error is evaluated at log steps: show the last one
        ref = f" rel_l2={self._err:.2e}" if math.isfinite(self._err) else ""
        more = "".join(f" {a}={b:.4g}" for a, b in (extra or {}).items())
        if self.bar is not None:
            self.bar.set_description_str(f"{stage} {k}/{steps}", refresh=False)
            self.bar.set_postfix_str(f"loss={value:.2e}{ref}{more} {_short(terms, self.names)}",
                                     refresh=False)   # the terms last: a narrow terminal cuts them
            self.bar.update(n)
        elif self.plain:
            done = self._done + n
            if done >= self._next_plain or done >= self.total:
                self._next_plain = done + max(1, self.total // 10)
                log.info(f"{stage:>6} {k:>6}/{steps:<6} loss {value:.3e} "
                         f"[{_short(terms, self.names)}]{ref}{more}  {rate:.1f} steps/s")
        self._done += n

    def line(self, stage, k, steps, value, terms, err, rate, weights=None, extra=None):
        """One row of the verbose table."""
        if not (self.show and self.verbose):
            return
        parts = "  ".join(f"{n} {float(t):.2e}" for n, t in zip(self.names, terms))
        row = f"{stage:>6} {k:>6}/{steps:<6} loss {value:.3e}  [{parts}]"
        if math.isfinite(err):
            row += f"  rel_l2 {err:.3e}"
        if weights is not None:
            row += "  w " + ",".join(f"{w:.3g}" for w in weights)
        for n, v in (extra or {}).items():
            row += f"  {n} {v:.5g}"
        log.info(row + f"  {rate:.1f} steps/s")

    def shrink(self, n):
        """A stage ended ``n`` steps early (converged): the run is that much shorter."""
        if n > 0:
            self.total -= n
            if self.bar is not None:
                self.bar.total = self.total
                self.bar.refresh()

    def note(self, text):
        """A message between bar updates (a stage ending early, a resume)."""
        if not self.show:
            return
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        else:
            log.info(text)

    def close(self, summary):
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        if self.show:
            log.info(summary)


__all__ = ["Console"]
