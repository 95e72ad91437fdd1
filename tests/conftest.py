"""Settings for the whole test session, and for every process a test starts (they inherit the environment).

JAX's persistent compilation cache: one folder per pytest session (JAX_COMPILATION_CACHE_DIR, removed when the session
ends), so a gradient step that several processes of a test compile alike (a `robot-rl train` run and its resumes, an
in-process run after another) is compiled once per session, not once per process. It only skips repeated compiles:
what runs is the same executable. A folder given by the caller is kept as given. The learner node sets its own cache
(its jax_cache_dir parameter: the run folder's by default), as it does in production.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
    _JAX_CACHE = tempfile.mkdtemp(prefix="robot-rl-tests-jax-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _JAX_CACHE
    atexit.register(shutil.rmtree, _JAX_CACHE, ignore_errors=True)
