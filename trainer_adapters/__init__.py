"""Trainer adapters: gym client, policy samplers, rollout driver, one module per trainer."""
