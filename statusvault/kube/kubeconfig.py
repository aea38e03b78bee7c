"""Client configuration: kubeconfig (KUBECONFIG list, --kubeconfig, --context) or in-cluster.

Handled natively, because importing the kubernetes client costs ~0.4 s per run: tokens, token files,
client certificates, CA data, basic auth and exec credential plugins. Legacy `auth-provider` users fall back to
the kubernetes client's loader. Where the credential comes from, and how it is renewed, is credentials.py's job.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from statusvault.errors import ConfigError
from statusvault.kube.credentials import AuthProvider, CredentialSource, ExecPlugin, Static, TokenFile, data_file

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclasses.dataclass
class ClientConfig:
    host: str
    verify: bool = True
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    server_hostname: str | None = None
    proxy: str | None = None
    basic_auth: str | None = None  # "user:password"
    impersonate: str | None = None  # Impersonate-User: act as this user (a kubeconfig user's `as`, the controller)
    credentials: CredentialSource = dataclasses.field(default_factory=lambda: Static("the client configuration"))

    def token(self) -> str | None:
        """The bearer token to send now."""
        return self.credentials.current().token


def _paths(explicit: str | None) -> list[Path]:
    if explicit:
        return [Path(explicit).expanduser()]
    env = os.environ.get("KUBECONFIG")
    if env:
        return [Path(p).expanduser() for p in env.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def _merge(paths: list[Path]) -> tuple[dict[str, Any], dict[str, Path]]:
    """Merge kubeconfig files as kubectl does: the first file to define a name wins."""
    merged: dict[str, Any] = {"clusters": {}, "users": {}, "contexts": {}, "current-context": ""}
    origin: dict[str, Path] = {}
    for path in paths:
        if not path.exists():
            continue
        try:
            doc = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError) as e:
            raise ConfigError(f"cannot read kubeconfig {path}: {e}") from e
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {path} is not a mapping")
        merged["current-context"] = merged["current-context"] or doc.get("current-context", "")
        for section, key in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
            for entry in doc.get(section) or []:
                if isinstance(entry, dict) and entry.get("name") not in merged[section]:
                    merged[section][entry.get("name")] = entry.get(key) or {}
                    origin[f"{section}/{entry.get('name')}"] = path
    return merged, origin


def load(kubeconfig: str | None = None, context: str | None = None) -> ClientConfig:
    paths = _paths(kubeconfig)
    if not any(p.exists() for p in paths):
        if kubeconfig is None and not os.environ.get("KUBECONFIG") and os.environ.get("KUBERNETES_SERVICE_HOST"):
            return in_cluster()
        where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        raise ConfigError(f"no kubeconfig found at {where}: pass --kubeconfig or set KUBECONFIG")
    merged, origin = _merge(paths)
    name = context or merged["current-context"]
    if not name or name not in merged["contexts"]:
        raise ConfigError(f"kubeconfig context {name!r} not found" if name else "kubeconfig has no current-context")
    ctx = merged["contexts"][name]
    cluster = merged["clusters"].get(ctx.get("cluster"))
    user = merged["users"].get(ctx.get("user"), {})
    if not cluster or not cluster.get("server"):
        raise ConfigError(f"kubeconfig context {name!r} names no cluster with a server")
    if "auth-provider" in user:
        return _legacy(kubeconfig, name)
    base = origin.get(f"clusters/{ctx.get('cluster')}", paths[0]).parent
    cfg = _cluster(cluster, base)
    _user(cfg, str(ctx.get("user")), user, origin.get(f"users/{ctx.get('user')}", paths[0]).parent)
    return cfg


def current_context(kubeconfig: str | None = None) -> str | None:
    """The context a client loaded now would use; None without a kubeconfig (in a pod). Worker processes
    are given it by name, so a `kubectl config use-context` during a run cannot point them elsewhere."""
    paths = _paths(kubeconfig)
    if not any(p.exists() for p in paths):
        return None
    return _merge(paths)[0].get("current-context") or None


def _rel(base: Path, path: str) -> str:
    return str((base / os.path.expanduser(path)).resolve())


def _cluster(c: dict[str, Any], base: Path) -> ClientConfig:
    cfg = ClientConfig(
        host=str(c["server"]).rstrip("/"),
        verify=not c.get("insecure-skip-tls-verify", False),
        server_hostname=c.get("tls-server-name"),
        proxy=c.get("proxy-url"),
    )
    if c.get("certificate-authority-data"):
        cfg.ca_file = data_file(c["certificate-authority-data"], ".crt")
    elif c.get("certificate-authority"):
        cfg.ca_file = _rel(base, c["certificate-authority"])
    return cfg


def _user(cfg: ClientConfig, name: str, u: dict[str, Any], base: Path) -> None:
    if u.get("client-certificate-data"):
        cfg.cert_file = data_file(u["client-certificate-data"], ".crt")
    elif u.get("client-certificate"):
        cfg.cert_file = _rel(base, u["client-certificate"])
    if u.get("client-key-data"):
        cfg.key_file = data_file(u["client-key-data"], ".key")
    elif u.get("client-key"):
        cfg.key_file = _rel(base, u["client-key"])
    if u.get("as"):  # kubectl's impersonation (--as); its groups (`as-groups`) are not sent
        cfg.impersonate = str(u["as"])
    if u.get("username") and u.get("password"):
        cfg.basic_auth = f"{u['username']}:{u['password']}"
    if u.get("token"):
        cfg.credentials = Static(f"kubeconfig user {name!r}", str(u["token"]))
    elif u.get("tokenFile"):
        cfg.credentials = TokenFile(Path(_rel(base, u["tokenFile"])))
    elif u.get("exec"):
        cfg.credentials = ExecPlugin(u["exec"])
    else:
        cfg.credentials = Static(f"kubeconfig user {name!r}")


def in_cluster() -> ClientConfig:
    host, port = os.environ["KUBERNETES_SERVICE_HOST"], os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    ca = SA_DIR / "ca.crt"
    return ClientConfig(
        host=f"https://{host}:{port}", ca_file=str(ca) if ca.exists() else None, credentials=TokenFile(SA_DIR / "token")
    )


def _legacy(kubeconfig: str | None, context: str) -> ClientConfig:
    """auth-provider users (gcp, oidc, azure): let the kubernetes client do what it knows."""
    conf = _k8s_configuration(kubeconfig, context)
    credentials = AuthProvider(
        f"the auth-provider of kubeconfig context {context!r}",
        _bearer(conf),
        lambda: _bearer(_k8s_configuration(kubeconfig, context)),
    )
    return ClientConfig(
        host=conf.host.rstrip("/"),
        verify=bool(conf.verify_ssl),
        ca_file=conf.ssl_ca_cert,
        cert_file=conf.cert_file,
        key_file=conf.key_file,
        proxy=conf.proxy,
        credentials=credentials,
    )


def _k8s_configuration(kubeconfig: str | None, context: str) -> Any:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    conf = k8s_client.Configuration()
    try:
        k8s_config.load_kube_config(
            config_file=kubeconfig,
            context=context,
            client_configuration=conf,  # type: ignore[no-untyped-call]
            persist_config=False,
        )
    except ConfigException as e:
        raise ConfigError(f"cannot load Kubernetes configuration: {e}") from e
    return conf


def _bearer(conf: Any) -> Callable[[], str | None]:
    """The token of a kubernetes client Configuration, renewed by its refresh hook when expired."""

    def token() -> str | None:
        if conf.refresh_api_key_hook is not None:
            conf.refresh_api_key_hook(conf)
        value = conf.get_api_key_with_prefix("BearerToken") or conf.get_api_key_with_prefix("authorization")
        return value.removeprefix("Bearer ") if value else None

    return token
