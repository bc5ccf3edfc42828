"""The whole request space of the live server, fuzzed from its own published schema
(`/openapi.json`) with Schemathesis: every endpoint, its examples, the coverage phase (each
boundary and each kind of wrong value), random requests and the stateful link (the model list
to the model). No 5xx, every response as documented, every invalid request refused with a 4xx;
and the server answers a valid request after the run. Bounded: at most FUZZ_SECONDS, a few
examples per operation, short answers (support/fuzzhooks.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support import REPO
from support.serverproc import running

pytestmark = pytest.mark.slow
FUZZ_SECONDS = 75
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance,negative_data_rejection")


def test_the_server_survives_its_own_schema_fuzzed(tmp_path: Path):
    pytest.importorskip("schemathesis")
    with running(["--model", "starter", "--ctx", "512", "--queue", "64"], tmp_path) as srv:
        env = {**os.environ, "SCHEMATHESIS_HOOKS": "support.fuzzhooks",
               "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO),
                                              os.environ.get("PYTHONPATH", "")])}
        cli = Path(sys.executable).with_name("schemathesis")
        run = subprocess.run(
            [str(cli), "run", srv.url + "/openapi.json", "--checks", CHECKS,
             "--phases", "examples,coverage,fuzzing,stateful", "--max-examples", "12",
             "--max-time", str(FUZZ_SECONDS), "--workers", "1", "--seed", "7",
             "--request-timeout", "60", "--generation-database", "none", "--no-color",
             "--suppress-health-check", "all", "--warnings", "off",
             "--output-sanitize", "false"],
            capture_output=True, text=True, env=env, timeout=FUZZ_SECONDS + 120, cwd=tmp_path)
        report = run.stdout[-6000:] + run.stderr[-2000:]
        assert run.returncode == 0, report
        found = re.search(r"Operations:\s+(\d+) selected / (\d+) total", run.stdout)
        assert found and found.group(1) == found.group(2), report  # every endpoint selected ...
        assert f"Tested: {found.group(1)}" in run.stdout, report  # ... and exercised
        links = re.search(r"API Links:\s+(\d+) covered", run.stdout)
        assert links and int(links.group(1)) >= 1, report  # the models -> model link at least
        assert "No issues found" in run.stdout, report
        assert "Traceback" not in srv.log(), srv.log()[-3000:]
        status, body = srv.post_json("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4})
        assert status == 200 and body["choices"][0]["message"]["content"] is not None, body
