"""The commands behind the CLI: tape, symbols, load, the foreground of `monotape run`, and the
flags they share (flags.py)."""
