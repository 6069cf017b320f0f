"""A function run on a thread of its own, its result or its error taken later.

Owns: `OnThread`. Used where codegen overlaps work with the caller's: quick code's cold
half (runtime.quick_object) and the pool's compile (pool.prefetch).
"""
import threading


class OnThread:
    """`fn()` started on a daemon thread named `name`; `result()` waits for it and
    returns its value or raises its error in the caller."""

    def __init__(self, fn, name):
        self.value = self.error = None
        self._fn = fn
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.value = self._fn()
        except BaseException as e:  # noqa: BLE001 -- result() raises it in the caller
            self.error = e

    def result(self):
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


__all__ = ["OnThread"]
