"""A read-only web view of what memory holds: conversations, turns, entities, health.

Needs the ``ui`` extra (``pip install 'neotoma-agent[ui]'``: Jinja2, for templates that
escape every stored string). ``neotoma-agent ui`` serves it on 127.0.0.1; ``neotoma-agent
serve`` mounts it under ``/ui/`` beside the REST routes. In code::

    from aiohttp import web
    from neotoma_agent.ui import create_ui_app, mount_ui

    app = web.Application()
    mount_ui(app, create_ui_app(store, token="s3cret"))

:func:`standalone_app` is the whole of ``neotoma-agent ui``: the view and a root that
leads into it, behind the ``Host`` guard.

Every page has a JSON twin under ``/ui/api/`` with the shapes ``show --json``,
``stats --json`` and ``audit --json`` print.
"""

from __future__ import annotations

from ._app import UI_PREFIX, create_ui_app, mount_ui, standalone_app

__all__ = ["UI_PREFIX", "create_ui_app", "mount_ui", "standalone_app"]
