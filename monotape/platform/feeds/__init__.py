"""Venue simulator, redundant feed handlers, replay adapter and the epoch store."""
