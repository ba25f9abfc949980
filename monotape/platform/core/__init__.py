"""Sans-I/O stages: values in, values out (no awaits, sockets, prometheus, wall clock)."""
