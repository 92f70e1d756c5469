"""hw_profile's dependency rules: it never imports the simulator or the runtime, and its table, roofline, fit, view
and CLI modules import without torch (torch is imported only inside the profiler's functions)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "hw_profile"


def test_never_imports_simulator_or_runtime():
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in ("simulator", "dspark_runtime"), f"{path.name} imports {name}"


@pytest.mark.slow
def test_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
        "import hw_profile.tables.step_table, hw_profile.kernels.roofline, hw_profile.tables.fit, hw_profile.view.show, hw_profile.cli\n"
        "import hw_profile.measure.telemetry, hw_profile.measure.profiler, hw_profile.measure.model_builder, hw_profile.measure.peaks\n"
        "from hw_profile.kernels.roofline import analytic_table\n"
        "assert analytic_table('qwen3-8b', 'H200', b_axis=[1, 2], k_axis=[0]).grid.step_ms(1, 0) > 0\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
