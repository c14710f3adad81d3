"""`openenv/<name>`: OpenEnv environments served by their own OpenEnv server, played as gym environments."""
