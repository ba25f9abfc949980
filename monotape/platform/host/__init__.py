"""The multi-process host (``monotape run --writers N``): one process per role, supervised by
the host process, which also serves the admin API for all of them.

Roles (each ``main(spec) -> int`` in its own module, started as
``python -m monotape.platform.host ROLE SPEC_JSON``): ``venue`` (the simulator or the replay,
sending each venue's stream to both of its handlers), ``handler`` (one feed handler, publishing
normalized ticks on the IPC bus or NATS), ``sequencer`` (lanes, conflation, encode once, the
frame ring's producer) and ``writer`` (the WebSocket endpoint on a SO_REUSEPORT port, fed by the
frame ring). ``spec.RoleSpec`` is what the host tells a role; ``telemetry`` is how a role shows
its metrics to the host.
"""
