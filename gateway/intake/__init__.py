"""Intake: what an adapter hands in (Envelopes) goes through the chain of handlers into a stored
burst, or into the spool when Redis is away."""
