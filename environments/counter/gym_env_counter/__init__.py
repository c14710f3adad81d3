"""The counter environment: the smallest stateful, multi-turn environment (walk-throughs, benchmarks)."""
