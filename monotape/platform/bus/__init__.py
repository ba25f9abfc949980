"""The tick bus: feed handlers publish, the sequencer subscribes (in-process and NATS)."""
