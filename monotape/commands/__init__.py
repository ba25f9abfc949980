"""The client commands behind the CLI: tape, symbols, the foreground of `monotape run`."""
