"""Trainer adapters: gym client, policy samplers, the token-exact rollout driver, one package per trainer.

`client` (GymClient, SyncGymClient), `toolcalls`, `chat` (ChatRenderer), `remote_chat`, `samplers`,
`generation`, `policy_server`, `driver` (RolloutDriver), `trl`. Importing this package imports nothing
heavy: torch, transformers and trl are imported inside the functions that need them (the `[trl]` extra),
so the service can use the client and the driver without a trainer stack. See `docs/trl.md`.
"""
