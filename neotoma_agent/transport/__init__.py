"""Transports: how the turn protocol reaches a Neotoma store."""
