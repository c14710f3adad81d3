"""Sandboxes for model-written code: one protocol, one module per backend."""
