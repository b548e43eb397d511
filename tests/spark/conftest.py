"""One local[2] SparkSession for all Spark tests (startup takes seconds on 2 cores).

Tests here skip, with the reason, when PySpark or Java is missing.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _java_missing() -> bool:
    java_home = os.environ.get("JAVA_HOME")
    return shutil.which("java") is None and not (
        java_home and Path(java_home, "bin", "java").exists()
    )


def pytest_collection_modifyitems(items: list[Any]) -> None:
    here = Path(__file__).parent
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    pytest.importorskip("pyspark", reason="pyspark is not installed: pip install -e '.[spark]'")
    if _java_missing():
        pytest.skip("Spark needs Java 17+ (no java on PATH and no JAVA_HOME)")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("hookstream-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
