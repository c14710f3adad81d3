"""The episode gateway (issue 27, docs/gateway.md): an OpenAI-compatible base URL per episode that
forwards an agent's chat calls to the operator's policy endpoint and records each call's token ids and
logprobs on the episode, and the rule that turns those calls into token-exact training samples.

`samples` and `record` are pure; `service` holds the live episodes' gateways and the upstream client.
"""
