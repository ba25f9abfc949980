"""The admin API that both placements (node/ and host/) serve.

The app, its desk, latency, params and view handlers, the server, the watchlist site and the
fault switches the desk reads.
"""
