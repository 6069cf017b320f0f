"""Test configuration: a deterministic hypothesis profile is the default (CI); set
HYPOTHESIS_PROFILE=random for randomized runs."""
import os
import tempfile

from hypothesis import HealthCheck, settings

# Compiled code goes to a fresh cache directory per test session, not the user's.
os.environ.setdefault("ADKIT_CACHE_DIR", tempfile.mkdtemp(prefix="adkit-test-cache-"))

settings.register_profile("deterministic", derandomize=True, max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("random", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
