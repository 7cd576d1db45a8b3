"""What a desktop shows, beyond its pixels: screenshot transforms (:mod:`.transform`), top-level windows
(:mod:`.windows`), readiness conditions and a stable screen (:mod:`.readiness`), and the accessibility tree
(:mod:`.accessibility`). :class:`deskctl.Desktop`'s methods for these delegate here; nothing in this package is
imported until one of them is called.
"""
