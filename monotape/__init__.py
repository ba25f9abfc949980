"""monotape: a market-data fan-out tier where a price never moves backwards on a screen."""

__all__ = ["__version__"]

__version__ = "0.1.0"
