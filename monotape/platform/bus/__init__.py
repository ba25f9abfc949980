"""The tick bus: feed handlers publish, the sequencer subscribes. ``memory``: the protocol and
the in-process bus; ``nats_codec``, ``nats_bus``, ``nats_collector``: the same over NATS."""
