"""A fleet on Temporal (docs/fleet.md): one durable workflow per issue, runs on any worker that has a free lane.

The package is named for what the user gets — a fleet of workers — rather than for the engine behind it: the
engine is chosen by ``engine.kind`` in the config, and only this package imports the Temporal SDK (``temporalio``,
beflow's ``temporal`` extra), lazily, so that a project on the embedded engine never loads it.

- :mod:`beflow.fleet.shapes`: what crosses Temporal (workflow and activity inputs and results: keys, ids,
  outcomes; never a token, a transcript or an injected value), and the ids.
- :mod:`beflow.fleet.workflow`: the issue's workflow (deterministic: Temporal replays it).
- :mod:`beflow.fleet.remote`: the connection to the service, and a synchronous bridge for the claim store.
- :mod:`beflow.fleet.claims`: the claim store of a fleet (a running workflow holds its issue).
- :mod:`beflow.fleet.worker`: ``beflow worker``: lanes, and the activities (a lane's claim, a run).
- :mod:`beflow.fleet.dispatch`: ``beflow watch`` on a fleet: ready issues become workflows.
- :mod:`beflow.fleet.devserver`: ``beflow temporal dev``: Temporal's local dev server, for a try-out and the tests.
"""
