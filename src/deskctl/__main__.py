"""``python -m deskctl``: the same as the ``deskctl`` console script."""

from deskctl.cli import entry

entry()
