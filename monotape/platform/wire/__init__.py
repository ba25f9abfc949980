"""The wire protocol (docs/wire.md) in code: codec, requests, test vectors."""
