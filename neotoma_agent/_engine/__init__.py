"""The turn machine: what a turn stores and reads, decided without I/O.

Sans I/O, as h11's and hyper-h2's connections are: each step of a turn (the enter's user
store, a closing store, the replay of a re-run) is a generator that yields requests
(:mod:`.requests`: a store, a lookup, a retrieval's lookups, an entity's observations, a
history page) and is sent their answers,
or has their errors thrown in; it returns what the step wrote. It never touches a
transport, an event loop, a thread or the clock: the clock's readings (the run fields)
come in as arguments. A driver answers the requests: ``_phases.Phases`` on any
:class:`~neotoma_agent.Transport` (anyio: task groups, deadlines, the shield,
OpenTelemetry), :func:`.requests.run` in the caller's thread (a hook, on a store file:
``transport.embedded._turns``). The tests drive it by hand and over a store file
(tests/engine/test_engine.py).

- :mod:`.requests`: the requests a step yields, and what answers each;
- :mod:`.machine`: the steps: one store, a phase that replays a re-run, the closing (of
  a turn's ``Ending``: completed or abandoned) and the enter (its plan, its user store,
  what it wrote);
- :mod:`.rerun`: the clock readings a re-run's tool calls take from the earlier run's;
- :mod:`.history`: the history read's pages (``HistoryPage``), grouped by turn.

The drivers import what they drive from here: the steps, their records and the requests.
"""

from .machine import Entering as Entering
from .machine import EnterState as EnterState
from .machine import TurnMachine as TurnMachine
from .phase_records import CloseOutcome as CloseOutcome
from .phase_records import Ending as Ending
from .phase_records import EnterAttempt as EnterAttempt
from .phase_records import Opened as Opened
from .phase_records import Prompt as Prompt
from .requests import HistoryPage as HistoryPage
from .requests import Lookup as Lookup
from .requests import Lookups as Lookups
from .requests import Machine as Machine
from .requests import Observations as Observations
from .requests import Request as Request
from .requests import Store as Store
from .requests import ToolObservations as ToolObservations
from .requests import run as run
