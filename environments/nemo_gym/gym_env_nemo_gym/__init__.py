"""NeMo Gym resources servers as gym environments (`nemo_gym/<name>`, one per manifest)."""
