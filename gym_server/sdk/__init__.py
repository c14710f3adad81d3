"""The environment SDK: what an environment author imports (re-exported from `gym_server`)."""
