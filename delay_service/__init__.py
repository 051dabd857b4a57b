"""Delayed delivery: buffer topic -> schedule state -> timing wheel -> target topic."""
