"""`python -m gym_server` is the `gym-server` command."""

from gym_server.cli.main import main

main()
