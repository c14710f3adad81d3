"""The `math` environment: procedural problems, one answer in `\\boxed{}`, checked by math-verify."""
