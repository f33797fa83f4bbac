"""The turn machine: what a turn stores and reads, decided without I/O.

Sans I/O, as h11's and hyper-h2's connections are: each step of a turn (the enter's user
store, a closing store, the replay of a re-run) is a generator that yields requests
(:mod:`.requests`: a store, a lookup, an entity's observations) and is sent their answers,
or has their errors thrown in; it returns what the step wrote. It never touches a
transport, an event loop, a thread or the clock: the clock's readings (the run fields)
come in as arguments. A driver answers the requests: ``_phases.Phases`` on any
:class:`~neotoma_agent.Transport` (anyio: task groups, deadlines, the shield,
OpenTelemetry). The tests drive it with a fake I/O loop (tests/test_engine.py).

- :mod:`.requests`: the requests a step yields, and what answers each;
- :mod:`.machine`: the steps: one store, a phase that replays a re-run, the closings
  (completed, abandoned) and the enter (its plan, its user store, what it wrote);
- :mod:`.rerun`: the clock readings a re-run's tool calls take from the earlier run's.
"""
