"""The terminal SDK: the screen's view and admit guard, reconnect policy, the asyncio client."""
