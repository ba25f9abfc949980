"""Asyncio drivers of the core that move bytes to terminals: upgrade, connection, writes."""
