"""The wire protocol (docs/wire.md) in code, no I/O: ``codes``, ``varints``, ``records`` and
``record_reader``, ``messages``, ``framing`` (gathered by the ``codec`` face), client requests
(``requests``) and the test vectors every codec must pass (``vectors``)."""
