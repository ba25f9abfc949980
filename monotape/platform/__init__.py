"""The fan-out pipeline: feeds -> sequencer -> conflation -> codec -> fan-out -> terminals.

Importable only as ``monotape.platform``: a top-level ``platform`` would shadow the stdlib.
"""

__all__: list[str] = []
