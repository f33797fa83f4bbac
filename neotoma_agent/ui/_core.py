"""The web view's only door to private core modules: two names, each kept for a reason.

Everything the view reads goes through the public API (:mod:`neotoma_agent.reads` and the
package's names). What stays here is not a read, and is not a promise the library makes to
its users (CONTRIBUTING names the same two):

- ``get_logger`` (``_log``): the view logs as the rest of the library does, one event
  format under the ``neotoma_agent`` logger, silent below WARNING;
- ``IdentityError`` (``_identity``): a conversation id the identity rules cannot derive an
  entity id from is the visitor's mistake, answered 400, not a server error.
"""

from __future__ import annotations

from .._identity import IdentityError as IdentityError

__all__ = ["IdentityError"]
