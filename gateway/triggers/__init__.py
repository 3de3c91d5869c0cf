"""Triggers beyond a message: schedules, routines, group watch, external events."""
