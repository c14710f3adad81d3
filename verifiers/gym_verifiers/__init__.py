"""The verifier library: one module per family of checks."""
