"""The ``mdsd`` command-line interface (Typer). The library never depends on it."""
