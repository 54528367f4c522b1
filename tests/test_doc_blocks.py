"""tools/doc_blocks.py, the runner of the docs' Python blocks, on small pages of its own.

The real pages (README.md, docs/**/*.md) are run by the CI step ``python
tools/doc_blocks.py`` (about 20 s); these tests check the runner's rules: fragments and
``needs=`` blocks are skipped, one page shares a namespace and nothing leaks into the
next, a failure names the file and the line, files written land in a temporary folder.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "doc_blocks.py"


def _run(*files: Path):
    return subprocess.run(
        [sys.executable, "-P", str(TOOL), "-v", *map(str, files)], capture_output=True, text=True, timeout=120
    )


def test_pages_rules(tmp_path):
    a = tmp_path / "a.md"
    a.write_text(
        "# a\n\n```python\nimport json\nvalue = 41\nopen('written.txt', 'w').write('x')\n```\n\n"
        "```python fragment\nf(x, *, y=1)  # a signature, not run\n```\n\n"
        "```python needs=no_such_module_here\nraise SystemExit('must not run')\n```\n\n"
        "```python\nassert value + 1 == 42\nprint(json.dumps(value))\n```\n"
    )
    b = tmp_path / "b.md"
    b.write_text(
        "```python\nimport sys\nassert 'value' not in globals()\nassert 'json' not in sys.modules or True\n```\n"
    )
    r = _run(a, b)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "a.md:3 " in out and "a.md:17 " in out and "b.md:1 " in out
    assert "skip" in out and "(fragment)" in out and "needs no_such_module_here" in out
    assert "3 passed, 0 failed, 2 skipped" in out
    assert not (tmp_path / "written.txt").exists() and not Path("written.txt").exists()


def test_failure_names_file_and_line(tmp_path):
    page = tmp_path / "bad.md"
    page.write_text(
        "intro\n\n```python\nx = 1\n```\n\ntext\n\n```python\ny = x + 1\nz = undefined_name\n```\n\n```python\nw = 3\n```\n"
    )
    r = _run(page)
    assert r.returncode == 1
    assert f"FAIL {page}:9" in r.stdout  # the opening fence of the failing block
    assert f'File "{page}", line 11' in r.stdout  # the traceback line is the Markdown file's
    assert "NameError" in r.stdout
    assert "1 later block(s)" in r.stdout
    assert "1 passed, 1 failed" in r.stdout


def test_lazy_errors_fail_the_block(tmp_path):
    """MLX defers work to evaluation: the runner evaluates what a block built."""
    page = tmp_path / "lazy.md"
    page.write_text("```python\nimport mlx.core as mx\nbad = mx.ones((2, 3)) @ mx.ones((2, 3))\n```\n")
    r = _run(page)
    assert r.returncode == 1 and "FAIL" in r.stdout, r.stdout


def test_command_lines_name_real_commands_and_options(tmp_path):
    page = tmp_path / "cli.md"
    page.write_text(
        "```bash\nlattice voxelize in.ply -o out.npz --voxel-size 0.1   # fine\n"
        "lattice voxelize in.ply -o - -s 0.1 | lattice pool - -o p.npz --no-such-option\n```\n\n"
        "```console\n$ lattice no-such-command x\n```\n"
    )
    r = _run(page)
    assert r.returncode == 1, r.stdout
    assert f"FAIL {page}:3: lattice pool: no option --no-such-option" in r.stdout
    assert f"FAIL {page}:7: lattice no-such-command: no such command" in r.stdout
    assert "2 of 4 name existing commands and options" in r.stdout
