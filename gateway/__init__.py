"""xpert-gateway core: platform-free pipeline from Envelope to expert run to rendered Progress."""

__version__ = "0.1.0"
