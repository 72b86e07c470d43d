"""accord.__version__ is the C++ library's, which is the public header's."""

import pathlib
import re

import accord


def test_version_is_the_headers(hvd):
    header = pathlib.Path(__file__).resolve().parents[3] / "runtime/include/accord/accord.h"
    parts = dict(re.findall(r"#define ACCORD_VERSION_(MAJOR|MINOR|PATCH) (\d+)", header.read_text()))
    assert accord.__version__ == f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    assert int(parts["MAJOR"]) >= 1
