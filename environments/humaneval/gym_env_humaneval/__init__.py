"""The `humaneval` environment: OpenAI's 164 HumanEval problems, scored by their unit tests in a sandbox."""
