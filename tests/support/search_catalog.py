"""A large, realistic tool catalog for search tests and the search benchmark (issue 31).

:func:`catalog` makes ``n`` tool definitions, deterministically: service x object x action
(e.g. ``jira_create_issue``: "Create a new issue in Jira. ..."), named in ``snake_case``,
``camelCase`` or with ``__`` so name splitting is exercised, each with parameters that have
descriptions. :data:`LABELLED` is a small labelled query set — natural-language requests and the
one tool that answers each — and :func:`recall_at` scores a search function on it."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

SERVICES: list[tuple[str, str]] = [
    ("github", "GitHub"),
    ("gitlab", "GitLab"),
    ("jira", "Jira"),
    ("slack", "Slack"),
    ("gmail", "Gmail"),
    ("calendar", "Google Calendar"),
    ("drive", "Google Drive"),
    ("notion", "Notion"),
    ("confluence", "Confluence"),
    ("salesforce", "Salesforce"),
    ("stripe", "Stripe"),
    ("shopify", "Shopify"),
    ("zendesk", "Zendesk"),
    ("hubspot", "HubSpot"),
    ("postgres", "PostgreSQL"),
    ("kubernetes", "Kubernetes"),
    ("aws", "Amazon Web Services"),
    ("datadog", "Datadog"),
    ("figma", "Figma"),
    ("trello", "Trello"),
    ("asana", "Asana"),
    ("dropbox", "Dropbox"),
    ("twilio", "Twilio"),
    ("sentry", "Sentry"),
    ("linear", "Linear"),
]

OBJECTS: list[tuple[str, str, str]] = [
    ("issue", "issue", "a tracked bug or task"),
    ("message", "message", "a chat or mail message"),
    ("file", "file", "a stored document or upload"),
    ("user", "user", "a member account"),
    ("invoice", "invoice", "a bill sent to a customer"),
    ("event", "event", "a scheduled meeting or appointment"),
    ("branch", "branch", "a line of development in a repository"),
    ("pull_request", "pull request", "a proposed code change for review"),
    ("channel", "channel", "a conversation room"),
    ("customer", "customer", "a buyer record"),
    ("dashboard", "dashboard", "a page of charts"),
    ("alert", "alert", "a monitoring notification"),
    ("ticket", "support ticket", "a help-desk request from a customer"),
    ("page", "page", "a wiki or notes page"),
    ("table", "table", "a database table"),
    ("pod", "pod", "a running container group"),
    ("bucket", "storage bucket", "an object storage container"),
    ("order", "order", "a purchase"),
    ("deal", "deal", "a sales opportunity"),
    ("comment", "comment", "a note attached to another item"),
]

ACTIONS: list[tuple[str, str]] = [
    ("create", "Create a new {o} in {s}."),
    ("get", "Get the details of one {o} in {s} by its id."),
    ("list", "List the {o}s in {s}, newest first, with paging."),
    ("update", "Update (edit) the fields of an existing {o} in {s}."),
    ("delete", "Delete (permanently remove) a {o} from {s}."),
    ("search", "Search {s} for {o}s matching a text query."),
    ("archive", "Archive a {o} in {s} so it is hidden but kept."),
    ("export", "Export {o}s from {s} to a CSV or JSON file."),
]

PARAMS: dict[str, dict[str, str]] = {
    "create": {"fields": "the new {o}'s fields", "project": "where to put it"},
    "get": {"id": "the {o}'s id"},
    "list": {"limit": "how many to return", "cursor": "where the previous page ended"},
    "update": {"id": "the {o}'s id", "fields": "fields to change"},
    "delete": {"id": "the {o}'s id", "confirm": "must be true"},
    "search": {"query": "words to look for", "limit": "how many results"},
    "archive": {"id": "the {o}'s id"},
    "export": {"format": "csv or json", "since": "only {o}s changed after this date"},
}


def _name(i: int, service: str, action: str, obj: str) -> str:
    """Three naming styles, so the index's name splitting is exercised."""
    style = i % 3
    if style == 0:
        return f"{service}_{action}_{obj}"
    if style == 1:
        camel = "".join(w.capitalize() for w in obj.split("_"))
        return f"{service}__{action}{camel}"
    return f"{service}.{action}_{obj}"


def _combos() -> list[tuple[int, int, int]]:
    """Every (service, object, action) index triple: the labelled ones first (so any catalog of
    at least ``len(LABELLED)`` tools answers the labelled set), the rest in a fixed shuffle."""
    every = [(s, o, a) for s in range(len(SERVICES)) for o in range(len(OBJECTS)) for a in range(len(ACTIONS))]
    first = [_index(*key) for _, key in LABELLED]
    rest = [c for c in every if c not in set(first)]
    random.Random(31).shuffle(rest)
    return list(dict.fromkeys(first)) + rest


def _index(service: str, action: str, obj: str) -> tuple[int, int, int]:
    return (
        [s for s, _ in SERVICES].index(service),
        [o for o, _, _ in OBJECTS].index(obj),
        [a for a, _ in ACTIONS].index(action),
    )


def catalog(n: int = 2000) -> list[dict[str, Any]]:
    """``n`` tool definitions (services x objects x actions = 4,000 distinct; beyond that the
    names get a numeric suffix), as ``{name, description, properties}`` dicts (the test
    upstream's ``--tools-file`` format)."""
    combos = _combos()
    out: list[dict[str, Any]] = []
    for i in range(n):
        round_, at = divmod(i, len(combos))
        s_i, o_i, a_i = combos[at]
        service, sname = SERVICES[s_i]
        obj, oname, gloss = OBJECTS[o_i]
        action, text = ACTIONS[a_i]
        name = _name(s_i + o_i + a_i, service, action, obj) + (f"_{round_}" if round_ else "")
        out.append(
            {
                "name": name,
                "description": text.format(o=oname, s=sname) + f" A {oname} is {gloss}.",
                "properties": {p: d.format(o=oname) for p, d in PARAMS[action].items()},
            }
        )
    return out


def name_of(service: str, action: str, obj: str) -> str:
    """The generated name of (service, action, object)."""
    s_i, o_i, a_i = _index(service, action, obj)
    return _name(s_i + o_i + a_i, service, action, obj)


#: Natural-language requests and the (service, action, object) that answers each (every catalog
#: of :func:`catalog` holds them: they come first).
LABELLED: list[tuple[str, tuple[str, str, str]]] = [
    ("open a new bug in jira", ("jira", "create", "issue")),
    ("send a slack message", ("slack", "create", "message")),
    ("delete a file from google drive", ("drive", "delete", "file")),
    ("find github pull requests about login", ("github", "search", "pull_request")),
    ("export stripe invoices to csv", ("stripe", "export", "invoice")),
    ("schedule a meeting in google calendar", ("calendar", "create", "event")),
    ("remove a postgres table permanently", ("postgres", "delete", "table")),
    ("list running kubernetes pods", ("kubernetes", "list", "pod")),
    ("edit a notion page", ("notion", "update", "page")),
    ("show details of a salesforce customer by id", ("salesforce", "get", "customer")),
    ("archive a confluence page so it is hidden", ("confluence", "archive", "page")),
    ("create an s3 storage bucket on amazon web services", ("aws", "create", "bucket")),
    ("search gmail messages for invoices", ("gmail", "search", "message")),
    ("list gitlab branches", ("gitlab", "list", "branch")),
    ("update a stripe customer", ("stripe", "update", "customer")),
    ("get a github issue by its id", ("github", "get", "issue")),
    ("delete a slack channel", ("slack", "delete", "channel")),
    ("export calendar events since a date as json", ("calendar", "export", "event")),
    ("new support ticket in jira", ("jira", "create", "ticket")),
    ("list datadog dashboards", ("datadog", "list", "dashboard")),
]


def labelled() -> list[tuple[str, str]]:
    """:data:`LABELLED` as (query, expected tool name)."""
    return [(q, name_of(*key)) for q, key in LABELLED]


def recall_at(k: int, search: Callable[[str, int], Sequence[str]]) -> tuple[float, list[tuple[str, str, list[str]]]]:
    """Recall@``k`` of ``search(query, k) -> names`` on the labelled set, and the misses
    (query, expected, got)."""
    misses: list[tuple[str, str, list[str]]] = []
    cases = labelled()
    for query, expected in cases:
        got = list(search(query, k))
        if expected not in got[:k]:
            misses.append((query, expected, got))
    return (len(cases) - len(misses)) / len(cases), misses
