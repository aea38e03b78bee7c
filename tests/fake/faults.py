"""Errors as the API server words them, and the faults a test arms: `FakeKube.fail(verb, rt, code, times)`."""

from __future__ import annotations

import dataclasses
import threading

import orjson

from statusvault.errors import KubeApiError
from statusvault.kube.transport import Request, api_error

REASONS = {
    403: "Forbidden",
    404: "NotFound",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
}
METHODS = {
    "get": "GET",
    "list": "GET",
    "watch": "GET",
    "create": "POST",
    "update": "PUT",
    "patch": "PATCH",
    "delete": "DELETE",
}


def status_error(method: str, path: str, code: int, message: str, reason: str = "") -> KubeApiError:
    """The KubeApiError the real transport raises for this Status answer (the same words, code and reason)."""
    reason = reason or REASONS.get(code, "")
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason}
    return api_error(Request(method, path), code, orjson.dumps({**status, "code": code}))


def not_found(method: str, path: str, what: str = "") -> KubeApiError:
    return status_error(
        method, path, 404, f"{what} not found" if what else "the server could not find the requested resource"
    )


def fault_message(verb: str, qualified: str, namespace: str, name: str, code: int) -> str:
    """What the API server says when `verb` fails with `code`."""
    resource, _, group = qualified.partition(".")
    if code == 403:
        where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
        target = f' "{name}"' if name else ""
        return (
            f'{qualified}{target} is forbidden: User "fake-user" cannot {verb} resource "{resource}" '
            f'in API group "{group}" {where}'
        )
    if code == 404:
        return "the server could not find the requested resource"
    if code == 409:
        return f'Operation cannot be fulfilled on {qualified} "{name}": the object has been modified'
    if code == 410:
        return "too old resource version"
    return f"a fault injected for {verb} {qualified}"


@dataclasses.dataclass
class Fault:
    verb: str  # the server's verb: get, list, watch, create, update, patch, delete
    qualified: str
    code: int
    times: int | None  # None: every time
    name: str = ""  # only requests naming this object ("": any)

    def matches(self, verb: str, qualified: str, name: str) -> bool:
        return (self.verb, self.qualified) == (verb, qualified) and self.name in ("", name)


class Faults:
    def __init__(self) -> None:
        self._armed: list[Fault] = []
        self._lock = threading.Lock()

    def arm(self, verb: str, qualified: str, code: int, times: int | None, name: str = "") -> None:
        if verb not in METHODS:
            raise ValueError(f"unknown verb {verb!r}: one of {', '.join(METHODS)}")
        with self._lock:
            self._armed.append(Fault(verb, qualified, code, times, name))

    def check(self, verb: str, qualified: str, namespace: str, name: str, path: str) -> None:
        """Raise the first armed fault for this verb and resource (and count it down)."""
        with self._lock:
            fault = next((f for f in self._armed if f.matches(verb, qualified, name)), None)
            if fault is None:
                return
            if fault.times is not None:
                fault.times -= 1
                if fault.times == 0:
                    self._armed.remove(fault)
        message = fault_message(verb, qualified, namespace, name, fault.code)
        raise status_error(METHODS[verb], path, fault.code, message)
