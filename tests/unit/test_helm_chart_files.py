"""The chart's files that follow from the package (charts/statusvault/): its CRDs are `controller render`'s own and its
versions are the release's. `python -m tests.unit.test_helm_chart_files` rewrites the CRDs after a CRD change.
What the templates render is checked against `controller render` on a real server (tests/integration/)."""

from __future__ import annotations

from pathlib import Path

import yaml

from statusvault import VERSION
from statusvault.cli.specfields import crds
from statusvault.schedule import DEFAULT_IMAGE

CHART = Path(__file__).resolve().parents[2] / "charts" / "statusvault"
HEADER = "# Generated from statusvault's CRDs (python -m tests.unit.test_helm_chart_files): do not edit.\n"


def crd_file(crd: dict) -> Path:
    return CHART / "crds" / f"{crd['metadata']['name']}.yaml"


def write_crds() -> None:
    for crd in crds():
        crd_file(crd).write_text(HEADER + yaml.safe_dump(crd, sort_keys=False))


def test_the_charts_crds_are_the_controllers():
    shipped = sorted(p.name for p in (CHART / "crds").glob("*.yaml"))
    assert shipped == sorted(crd_file(c).name for c in crds()), "one file per CRD, named after it"
    for crd in crds():
        assert yaml.safe_load(crd_file(crd).read_text()) == crd, (
            f"{crd_file(crd).name} differs from the package's CRD: python -m tests.unit.test_helm_chart_files"
        )


def test_the_chart_is_versioned_as_the_release():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION)


def test_the_default_image_is_the_one_controller_install_uses():
    image = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    assert f"{image['repository']}:{image['tag'] or VERSION}" == DEFAULT_IMAGE


if __name__ == "__main__":
    write_crds()
