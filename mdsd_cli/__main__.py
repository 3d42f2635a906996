"""``python -m mdsd_cli`` runs the command-line interface."""

from .cli.app import main

main()
