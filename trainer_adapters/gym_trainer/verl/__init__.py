"""verl adapter: gym episodes as verl agent loops, and the gym's verifiers as verl reward functions.

- `agent_loop.GymAgentLoop` (registered as `gym_agent`): a verl `AgentLoopBase` whose `run` plays one
  token-exact gym episode with the `RolloutDriver`, sampling through verl's own server manager (token
  ids in, token ids and logprobs out), and returns verl's `AgentLoopOutput` with the gym's reward.
- `sampler.ServerManagerSampler`: the `TokenSampler` over verl's server manager that the loop uses.
- `reward`: `compute_score` (one sample, verl's default reward loop) and `compute_score_batch` (verl's
  `batch` reward manager: one `/v1/verify/batch` call per batch) for single-turn tasks.

Import the submodules: `agent_loop` imports verl (and so torch and ray); `sampler` and `reward` do not.
See docs/verl.md.
"""
