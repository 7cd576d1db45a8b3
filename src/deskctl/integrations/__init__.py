"""Adapters that let other harnesses run on deskctl desktops. Each module here imports its harness and is loaded
only by that harness (``harbor run -e deskctl.integrations.harbor:DeskctlEnvironment``); ``import deskctl`` never
imports this package."""
