"""Native compiles on a worker thread, for `ak.jit(f, compile="background")`.

Owns: one worker thread (started on first use) running compile jobs one at a time, in
the order they were submitted; `submit(work) -> Job`; `wait()` (until nothing is queued
or running: for benchmarks and tests). Does not: know what a job compiles (tiered.py).
Why a thread pays: llvmlite calls LLVM through ctypes, which releases the GIL, so LLVM's
optimization and code generation run beside the Python that called the function.
NB: at interpreter exit, queued jobs are dropped and the running one is waited for: LLVM
cannot be interrupted, and a thread still inside LLVM while the interpreter (and LLVM's
static destructors) tear down can crash the process. A fork waits for the running job
too (a child must not inherit LLVM's or our locks held mid-compile); the child starts
its own worker, and jobs the parent had queued fail in the child (their callers then
compile in their own thread).
"""
import atexit
import collections
import os
import threading


class Job:
    """One compile: `result` once done, or the `error` it raised."""

    def __init__(self, work):
        self.work, self.result, self.error = work, None, None
        self._done = threading.Event()

    def done(self):
        return self._done.is_set()

    def wait(self, timeout=None):
        """Block until the job has run (True) or the timeout has passed (False)."""
        return self._done.wait(timeout)

    def run(self):
        try:
            self.result = self.work()
        except BaseException as e:  # noqa: BLE001 -- the caller gets it, the worker lives
            self.error = e
        self.work = None
        self._done.set()

    def fail(self, error):
        self.error, self.work = error, None
        self._done.set()


class _Worker:
    """The queue and the thread that drains it. `busy` is held while a job runs, so
    exit and fork can wait for the job in progress (and keep the next from starting)."""

    def __init__(self):
        self.cond = threading.Condition()
        self.busy = threading.Lock()
        self.queue = collections.deque()
        self.running = None
        self.thread = None
        self.closed = False

    def submit(self, job):
        with self.cond:
            if self.closed:
                job.fail(RuntimeError("the interpreter is exiting: no background compile"))
                return job
            self.queue.append(job)
            if self.thread is None:
                # a daemon thread: exit does not join it before atexit runs shutdown()
                self.thread = threading.Thread(target=self.loop, name="adkit-compile",
                                               daemon=True)
                self.thread.start()
            self.cond.notify()
        return job

    def loop(self):
        while True:
            with self.cond:
                while not self.queue and not self.closed:
                    self.cond.wait()
                if not self.queue:
                    return
                self.running = job = self.queue.popleft()
            with self.busy:
                job.run()
            with self.cond:
                self.running = None
                self.cond.notify_all()

    def wait(self, timeout=None):
        with self.cond:
            return self.cond.wait_for(lambda: not self.queue and self.running is None,
                                      timeout)

    def shutdown(self):
        """Drop queued jobs (their callers compile eagerly if called again) and wait
        for the running one."""
        with self.cond:
            self.closed = True
            dropped = list(self.queue)
            self.queue.clear()
            self.cond.notify_all()
            thread = self.thread
        for job in dropped:
            job.fail(RuntimeError("the interpreter is exiting: background compile dropped"))
        if thread is not None and thread is not threading.current_thread():
            thread.join()


_worker = _Worker()


def submit(work):
    """Run work() on the worker thread; returns its Job."""
    return _worker.submit(Job(work))


def wait(timeout=None):
    """Block until every submitted compile has finished; False if the timeout passed."""
    return _worker.wait(timeout)


def _before_fork():
    _worker.busy.acquire()  # the running job finishes first; the next waits


def _after_fork_in_parent():
    _worker.busy.release()


def _after_fork_in_child():
    """A fresh worker (the parent's thread does not exist here); the parent's queued
    jobs fail, so whoever waits for them compiles in its own thread."""
    global _worker
    running = _worker.running
    lost = list(_worker.queue) + ([running] if running and not running.done() else [])
    _worker = _Worker()
    for job in lost:
        job.fail(RuntimeError("forked while queued: background compile lost"))


atexit.register(lambda: _worker.shutdown())
if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)
