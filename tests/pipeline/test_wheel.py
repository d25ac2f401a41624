"""The built wheel, as a cluster gets it: it carries its confs, asks for no Spark, and pip installs
it beside a runtime's own libraries without changing one of them.

The runtime checks ask the package index (pip's dry run resolves, downloading metadata only), as
`pip install` on a cluster would: for Python 3.12 into Databricks Runtime 17.3 LTS ML's set
(conf/stacks/dbr-17.3.txt), for Python 3.11 into 15.4 LTS ML's (conf/stacks/spark-3.5.txt) and for
Python 3.13 into the newest set (conf/stacks/newest.txt). Databricks Runtime 16.4 LTS builds
packages no index serves for its Python 3.12 (pandas 1.5.3): its set is installed as the runtime
has it, as package records in a Python 3.12 environment, and pip is asked what it would add."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from conftest import REPO_ROOT, STACKS, package_name, pinned_versions

SPARK = {"pyspark", "delta-spark"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("intent_spark-*.whl")
    return built


def test_the_wheel_carries_every_built_in_conf_and_asks_for_no_spark(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        (meta,) = (n for n in names if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(meta).decode())
    shipped = {n.removeprefix("intent_spark/conf/") for n in names if n.startswith("intent_spark/conf/")}
    in_checkout = {str(p.relative_to(REPO_ROOT / "conf")) for p in (REPO_ROOT / "conf").rglob("*.yaml")}
    assert (
        shipped == in_checkout
        and {"split.yaml", "models.yaml", "sources/hm.yaml", "spark/local.yaml"} <= shipped
    )
    assert metadata["Requires-Python"] == ">=3.11"
    required = metadata.get_all("Requires-Dist")
    always = {package_name(r) for r in required if "extra ==" not in r}
    assert always and not always & SPARK, always
    spark_extra = {package_name(r) for r in required if 'extra == "spark"' in r}
    assert spark_extra == SPARK


def test_the_unpacked_wheel_finds_its_confs_outside_any_checkout(wheel, tmp_path):
    """The wheel's own files on PYTHONPATH, run from a folder with no conf/: the sources, the split
    conf and the Spark profiles are the package's."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path / "site")
    probe = (
        "from intent_spark.core.conf import CONF_DIR; from intent_spark.core.sources import load_source;"
        "from intent_spark.split.conf import load_split_conf;"
        "print(CONF_DIR); print(load_source('hm').name, load_split_conf(CONF_DIR / 'split.yaml', 'hm').floor_users)"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    where, found = done.stdout.splitlines()
    assert Path(where) == tmp_path / "site" / "intent_spark" / "conf"
    assert found.split()[0] == "hm" and int(found.split()[1]) > 0


@pytest.mark.parametrize(
    ("stack", "python"), [("dbr-17.3", "3.12"), ("newest", "3.13"), ("spark-3.5", "3.11")]
)
def test_pip_installs_the_wheel_beside_a_runtime_changing_none_of_its_packages(
    wheel, tmp_path, stack, python
):
    runtime = pinned_versions(STACKS / f"{stack}.txt")
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
            "--report", str(report), "--python-version", python, "--only-binary=:all:",
            "--target", str(tmp_path / "target"), "-c", str(STACKS / f"{stack}.txt"), str(wheel),
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, (
        f"pip could not install the wheel beside {stack} on Python {python}: {done.stderr}"
    )
    installed = {
        package_name(item["metadata"]["name"]): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    changed = {
        name: (runtime[name], version)
        for name, version in installed.items()
        if name in runtime and runtime[name] != version
    }
    assert changed == {}
    assert not SPARK & installed.keys()
    for name in ("pyarrow", "numpy", "pandas", "torch", "mlflow"):
        assert installed[name] == runtime[name]  # the runtime's own, not another


RUNTIMES = Path(__file__).parent / "runtimes"


def _python(version: str) -> str | None:
    """A working interpreter of that version: on PATH, or one pyenv installed but has not put there."""
    found = [
        shutil.which(f"python{version}"),
        *map(str, Path.home().glob(f".pyenv/versions/{version}.*/bin/python{version}")),
    ]
    for python in filter(None, found):
        if subprocess.run([python, "--version"], capture_output=True).returncode == 0:
            return python
    return None


PYTHON_3_12 = _python("3.12")


@pytest.mark.skipif(PYTHON_3_12 is None, reason="needs Python 3.12 (the 16.4 runtime's) on PATH or in pyenv")
def test_pip_adds_the_wheel_to_databricks_runtime_16_4_without_touching_its_packages(wheel, tmp_path):
    runtime = pinned_versions(RUNTIMES / "dbr-16.4.txt")
    env = tmp_path / "runtime"
    subprocess.run([str(PYTHON_3_12), "-m", "venv", "--without-pip", str(env)], check=True)
    (site,) = env.glob("lib/python3.12/site-packages")
    for name, version in runtime.items():  # what pip reads of an installed package
        record = site / f"{name.replace('-', '_')}-{version}.dist-info"
        record.mkdir()
        (record / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (record / "RECORD").write_text("")
    report = tmp_path / "report.json"
    done = subprocess.run(
        [
            sys.executable, "-m", "pip", "--python", str(env / "bin" / "python"), "install", "--quiet",
            "--dry-run", "--report", str(report), "--only-binary=:all:", "-c", str(RUNTIMES / "dbr-16.4.txt"), str(wheel),
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert done.returncode == 0, f"pip could not add the wheel to 16.4's set on Python 3.12: {done.stderr}"
    added = {package_name(item["metadata"]["name"]) for item in json.loads(report.read_text())["install"]}
    assert "intent-spark" in added and not added & (runtime.keys() | SPARK), added
