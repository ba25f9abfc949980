"""The fan-out path: CPU per delivered frame against its peers, and payloads per frame."""
