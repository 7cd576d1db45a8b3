"""The PNG encoder moved to :mod:`deskctl.core.png` (the layer below the providers and the agent); these names
stay importable from here."""

from deskctl.core.png import PNG_SIGNATURE, BandedPng, adler32_combine, encode_png, png_chunk, png_size

__all__ = ["PNG_SIGNATURE", "BandedPng", "adler32_combine", "encode_png", "png_chunk", "png_size"]
