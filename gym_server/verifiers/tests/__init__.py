"""Tests of the verifier library and the worker pool (a package, so workers can import `_worker_fns`)."""
