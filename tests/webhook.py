"""A real mutating admission webhook on loopback (HTTPS, its own certificate in the configuration's caBundle), for
tests of what a restore does when the server answers a write with what a webhook made of it."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

Mutate = Callable[[dict[str, Any]], list[dict[str, Any]]]  # the admitted object -> a JSON patch ([]: none)


def certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (a SAN: the API server's Go TLS ignores the common name)."""
    cert, key = directory / "webhook.crt", directory / "webhook.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


class Webhook:
    """Serves AdmissionReviews (admission.k8s.io/v1): each admitted object gets the patch `mutate` returns."""

    def __init__(self, directory: Path, mutate: Mutate):
        self.cert, key = certificate(directory)
        self.mutate, self.calls = mutate, 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.server.server_address[1]}/mutate"

    def configuration(self, name: str, group: str, resources: list[str], namespace_labels: dict[str, str]) -> dict:
        """A MutatingWebhookConfiguration that sends UPDATEs of the resources in namespaces so labelled here."""
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": f"{name}.statusvault.test",
                    "clientConfig": {"url": self.url, "caBundle": base64.b64encode(self.cert.read_bytes()).decode()},
                    "rules": [
                        {"apiGroups": [group], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": resources}
                    ],
                    "namespaceSelector": {"matchLabels": namespace_labels},
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "failurePolicy": "Fail",
                    "timeoutSeconds": 5,
                }
            ],
        }

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                request = review["request"]
                hook.calls += 1
                patch = hook.mutate(request["object"])
                response: dict[str, Any] = {"uid": request["uid"], "allowed": True}
                if patch:
                    response["patchType"] = "JSONPatch"
                    response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
                body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                   "response": response}).encode()  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler
