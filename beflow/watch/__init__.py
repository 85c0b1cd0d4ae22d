"""``beflow watch``: the dispatcher that keeps ready issues flowing through agents, its lanes, retries, holds, review
rounds and what wakes it."""
