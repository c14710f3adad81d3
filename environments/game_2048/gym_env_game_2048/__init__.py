"""The `game_2048` environment: 2048 towards a target tile, deterministic by seed."""
