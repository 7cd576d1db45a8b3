"""The layer below both the providers and the in-desktop agent (:mod:`deskctl.agent`): the X11 driver
(:mod:`.x11`), the PNG encoder (:mod:`.png`), the shell lines of commands on a guest (:mod:`.shell`) and the data a
desktop gives back (:mod:`.frames`). Nothing here imports :mod:`deskctl.providers` or the agent: the agent's image
is built from this layer alone (``deskctl.providers.docker.images.AGENT_FILES``), so a change to a provider or to
the registry does not change it."""
