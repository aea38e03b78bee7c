"""statusvault: back up Kubernetes custom resources with their status, restore them in two passes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("statusvault")
except PackageNotFoundError:  # running from a source tree without installation
    __version__ = "0.0.0+unknown"
