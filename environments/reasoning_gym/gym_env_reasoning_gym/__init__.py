"""The `reasoning_gym/<task>` family: reasoning-gym's procedural generators, scored by their own scorers."""
