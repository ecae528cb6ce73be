"""A one-line status for a step that has no progress bar of its own (Ward, k-means, DP-GMM,
the fixed-K protocol, the inventory's medoids): what runs and for how long.

    with status("ward/cypriot/seed0: ward on 1728 tokens, K 53", enabled=progress) as st:
        result = fit(...)
        st.done(f"K found {result.k_found}")

On a terminal the line ticks every second (a tqdm line, so it stacks with a method's own
epoch bars); in a log file (``dvc repro``, CI) it is one line at the start and one at the end.
Both go to stderr, like the bars.
"""
from __future__ import annotations

import contextlib
import sys
import threading
import time


class _Status:
    def __init__(self, desc: str, enabled: bool, interval: float):
        self.desc, self.enabled, self.interval = desc, enabled, interval
        self.t0 = time.time()
        self._tail = ""
        self._bar = None
        self._stop = threading.Event()
        self._thread = None
        if not enabled:
            return
        if sys.stderr.isatty():
            from tqdm.auto import tqdm
            self._bar = tqdm(total=None, desc=desc, bar_format="{desc}: {elapsed}{postfix}", leave=True,
                             file=sys.stderr)
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        else:
            print(f"{desc} ...", file=sys.stderr, flush=True)

    def _tick(self):
        while not self._stop.wait(self.interval):
            try:
                self._bar.refresh()
            except Exception:       # the bar was closed under us
                return

    def done(self, tail: str = "") -> None:
        """Text shown after the elapsed time when the step ends (e.g. ``K found 53``)."""
        self._tail = tail

    def close(self, failed: bool = False) -> None:
        if not self.enabled:
            return
        seconds = time.time() - self.t0
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        tail = "failed" if failed else self._tail
        if self._bar is not None:
            self._bar.set_postfix_str(f" {tail}" if tail else "", refresh=False)
            self._bar.close()
        else:
            print(f"{self.desc}: {'failed' if failed else 'done'} in {seconds:.1f}s"
                  + (f", {tail}" if tail and not failed else ""), file=sys.stderr, flush=True)


@contextlib.contextmanager
def status(desc: str, enabled: bool = True, interval: float = 1.0):
    st = _Status(desc, enabled, interval)
    try:
        yield st
    except BaseException:
        st.close(failed=True)
        raise
    st.close()
