"""Test fixtures that ship with the package: real daemons (nats-server, Prometheus,
Alertmanager) started on free loopback ports and stopped when the test ends."""
