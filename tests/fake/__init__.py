"""An in-memory API server for fast engine tests (`FakeKube`), fitting the whole KubeApi protocol.

Modelled: `.status` dropped on create (and on update) where the type has the subresource; `/status` writes
that take only the status; `409 AlreadyExists`; `resourceVersion` conflicts (409) and JSON-patch `test`
failures (422); DELETE preconditions (409); managedFields naming each writer's field manager (none for a body
with nothing to own); generateName; server-side defaults (a hook). LISTs page through the real paginator
(limit, continue tokens, remainingItemCount, label selectors, metadata-only answers, etcd's key order).
WATCHes read one change log (ADDED/MODIFIED/DELETED with resourceVersions, a closing BOOKMARK). A CRD
is Established at once and serves its resource (`discovery()`); deleting it deletes its objects and makes
its resource 404.

Faults, each a small explicit hook: `fail(verb, rt, code, times)` (403 on one resource, 409, 500, ...),
`before(verb, callback)` (another writer acts first, or a kill: raise),
`compact()` (continue tokens and WATCH positions before now: 410 Gone), `on_list(rt, callback)` (act
between LIST pages: delete a CRD mid-backup), `break_watch(rt, after)` (a stream breaks off), an answer lost
after the server acted (the resent create meets 409 AlreadyExists), another writer winning a race.
Not modelled: garbage collection, admission, LIST snapshots (a later page sees later writes), field selectors.
"""

from tests.fake.server import FakeKube

__all__ = ["FakeKube"]
