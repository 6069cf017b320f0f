"""Test configuration: a deterministic hypothesis profile is the default (CI); set
HYPOTHESIS_PROFILE=random for randomized runs."""
import importlib
import os
import tempfile

from hypothesis import HealthCheck, settings

# Compiled code goes to a fresh cache directory per test session, not the user's.
os.environ.setdefault("ADKIT_CACHE_DIR", tempfile.mkdtemp(prefix="adkit-test-cache-"))

# ak.jit's compile mode in the suite: "eager", so a test that calls a jitted function once
# checks native code (in the default mode, "background", a first call runs on numpy);
# ADKIT_TEST_JIT_COMPILE=background runs the suite in that mode (tests/test_jit_tiered.py
# tests both modes explicitly).
importlib.import_module("adkit.codegen.jit").DEFAULT_COMPILE = \
    os.environ.get("ADKIT_TEST_JIT_COMPILE", "eager")

settings.register_profile("deterministic", derandomize=True, max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("random", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
