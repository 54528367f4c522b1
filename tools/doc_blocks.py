"""Run every ```python block of README.md and docs/**/*.md, as a reader would paste them.

    python tools/doc_blocks.py [FILE.md ...] [--list] [-v]

Rules (CONTRIBUTING.md, "Documentation that runs"):

- The blocks of one file run in order in one namespace, in one fresh interpreter (a page
  builds its example up block by block, as a reader pasting them into one session would);
  nothing one page imported or defined is there for the next.
- ```` ```python needs=open3d ```` (one ``needs=`` per module) runs only where the module
  is installed (an optional extra), and is skipped, saying so, elsewhere.
- A block opened with ```` ```python fragment ```` is not run (a signature, a sketch that
  names things the page does not define); say in the prose what it is. Every other
  ```python block must run as written against the installed lattice.
- The working directory is a fresh temporary folder laid out like the repository root:
  ``examples`` links to the checkout's ``examples/`` and ``../shared`` to the shared data
  folder beside the checkout (``$LATTICE_SHARED``, default ``<checkout>/../shared``), so
  ``examples/models/...`` and ``../shared/data/...`` resolve as the docs say; files the
  examples write land there and are deleted afterwards. A file whose blocks read
  ``../shared/data`` is skipped (and says so) where that folder does not exist.
- After each block every MLX array the namespace holds (also as a SparseTensor's coords
  and features, or inside a tuple / list / dict) is evaluated: MLX is lazy, and an error it
  defers to evaluation must fail the block that built it.
- Standard output of the blocks is captured and shown only for a failing block.

Shell blocks (```` ```bash ````, ```` ```console ````, unlabeled) are not run, but each
``lattice CMD ...`` line in them must name a command of the installed CLI and only
options its ``--help`` lists.

A failure prints ``FAIL <file>:<line>`` (the line of the block's opening fence, or of the
command line) and the traceback, whose line numbers are those of the Markdown file; the
exit status is 1 when a block or a command line failed, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)([^`]*)$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    words: tuple[str, ...]
    code: str

    @property
    def fragment(self) -> bool:
        return "fragment" in self.words

    @property
    def needs(self) -> list[str]:
        return [w.split("=", 1)[1] for w in self.words if w.startswith("needs=")]

    @property
    def where(self) -> str:
        try:
            shown = self.path.resolve().relative_to(REPO)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown file (indented fences too; their indent is removed)."""
    out = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang, rest = m.groups()
        j = i + 1
        while j < len(lines) and not re.match(rf"^\s*{re.escape(fence[0])}{{{len(fence)},}}\s*$", lines[j]):
            j += 1
        body = [ln[len(indent) :] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1 : j]]
        out.append(Block(path, i + 1, lang.lower(), tuple(rest.split()), "\n".join(body) + "\n"))
        i = j + 1
    return out


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def shared_dir() -> Path:
    return Path(os.environ.get("LATTICE_SHARED", REPO.parent / "shared")).resolve()


def _evaluate(namespace: dict) -> None:
    """mx.eval every array the namespace holds (directly, as a SparseTensor's features, or in
    a tuple / list / dict), so an error MLX defers to evaluation fails the block."""
    import mlx.core as mx

    found = []

    def visit(v, depth=0):
        if isinstance(v, mx.array):
            found.append(v)
        elif depth < 2 and isinstance(v, (tuple, list)):
            for item in v:
                visit(item, depth + 1)
        elif depth < 2 and isinstance(v, dict):
            for item in v.values():
                visit(item, depth + 1)
        elif isinstance(getattr(v, "feats", None), mx.array) and isinstance(
            getattr(v, "coords", None), mx.array
        ):
            found.extend([v.coords, v.feats])

    for name, v in namespace.items():
        if not name.startswith("__"):
            visit(v)
    if found:
        mx.eval(found)


def run_file(path: Path, verbose: bool = False) -> tuple[int, int, int, list[str]]:
    """(run, failed, skipped, messages) for the python blocks of one file, in this process."""
    todo = [b for b in blocks(path) if b.lang == "python"]
    shared = shared_dir()
    if any("../shared/" in b.code for b in todo if not b.fragment) and not (shared / "data").is_dir():
        return 0, 0, len(todo), [f"skip {path.name}: its blocks read ../shared/data, not found at {shared}"]
    run = failed = skipped = 0
    msgs: list[str] = []
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="lattice-doc-") as tmp:
        work = Path(tmp) / "repo"
        work.mkdir()
        (work / "examples").symlink_to(REPO / "examples", target_is_directory=True)
        if shared.is_dir():
            (Path(tmp) / "shared").symlink_to(shared, target_is_directory=True)
        namespace = {"__name__": "__main__", "__file__": str(work / path.name)}
        os.chdir(work)
        try:
            for i, b in enumerate(todo):
                missing = [m for m in b.needs if importlib.util.find_spec(m) is None]
                if b.fragment or missing:
                    skipped += 1
                    if verbose or missing:
                        why = "fragment" if b.fragment else f"needs {', '.join(missing)}, not installed"
                        msgs.append(f"skip {b.where} ({why})")
                    continue
                out = io.StringIO()
                t0 = time.monotonic()
                run += 1
                try:
                    # padded so that the traceback's line numbers are the Markdown file's
                    code = compile("\n" * b.line + b.code, b.where.rsplit(":", 1)[0], "exec")
                    with contextlib.redirect_stdout(out):
                        exec(code, namespace)
                        _evaluate(namespace)  # MLX is lazy: run what the block built
                except (Exception, SystemExit) as e:  # every failure is reported, with its traceback
                    failed += 1
                    tb = e.__traceback__.tb_next if e.__traceback__ else None  # not this frame
                    text = "".join(traceback.format_exception(type(e), e, tb)).rstrip()
                    shown = out.getvalue()
                    msgs.append(f"FAIL {b.where}\n{text}" + (f"\n--- its output:\n{shown}" if shown else ""))
                    rest = sum(1 for c in todo[i + 1 :] if not c.fragment)
                    if rest:  # later blocks of the page build on this one
                        msgs.append(f"     ({rest} later block(s) of {path.name} not run)")
                    break
                if verbose:
                    msgs.append(f"ok   {b.where} ({time.monotonic() - t0:.1f} s)")
        finally:
            os.chdir(cwd)
    return run, failed, skipped, msgs


SHELL_LANGS = ("", "bash", "sh", "shell", "console")


def command_lines(files: list[Path]):
    """(where, command line) of every ``lattice ...`` line of the shell blocks (```` ```bash ````,
    ```` ```console ```` and unlabeled ones; ``$ `` prompts and pipes allowed)."""
    for f in files:
        for b in blocks(f):
            if b.lang not in SHELL_LANGS:
                continue
            for i, line in enumerate(b.code.splitlines()):
                text = line.strip().removeprefix("$ ")
                for part in text.split("|"):
                    words = part.split("#")[0].split()
                    if len(words) >= 2 and words[0] == "lattice" and not words[1].startswith("-"):
                        yield f"{b.where.rsplit(':', 1)[0]}:{b.line + 1 + i}", words


def check_commands(files: list[Path]) -> tuple[int, int, list[str]]:
    """(command lines checked, lines that failed, messages): each ``lattice CMD --opt -o ...``
    of the docs names a command of the installed CLI and only options its ``--help`` lists
    (nothing is run)."""
    from typer.testing import CliRunner

    from lattice_cli.main import app

    runner, helps, msgs, n, bad = CliRunner(), {}, [], 0, 0
    for where, words in command_lines(files):
        n += 1
        cmd = words[1]
        if cmd not in helps:
            r = runner.invoke(app, [cmd, "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
            helps[cmd] = r.output if r.exit_code == 0 else None
        if helps[cmd] is None:
            msgs.append(f"FAIL {where}: lattice {cmd}: no such command")
            bad += 1
            continue
        unknown = [
            m.group(1)
            for w in words[2:]
            if (m := re.match(r"^\[?(--?[A-Za-z][\w-]*)", w))
            and not re.search(rf"(?<![\w-]){re.escape(m.group(1))}(?![\w-])", helps[cmd])
        ]
        for opt in unknown:
            msgs.append(f"FAIL {where}: lattice {cmd}: no option {opt}")
        bad += bool(unknown)
    return n, bad, msgs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md, docs/**/*.md)")
    ap.add_argument("--list", action="store_true", help="list the python blocks, run nothing")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every block")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one file, in this process
    args = ap.parse_args(argv)
    files = [f.resolve() for f in args.files] or doc_files()
    if args.list:
        for f in files:
            for b in blocks(f):
                if b.lang == "python":
                    print(f"{b.where} {'fragment' if b.fragment else 'runs'}")
        return 0
    if args.child:
        r, fl, s, msgs = run_file(files[0], args.verbose)
        for m in msgs:
            print(m, flush=True)
        print(json.dumps({"run": r, "failed": fl, "skipped": s}))
        return 0
    t0 = time.monotonic()
    run = failed = skipped = 0
    for f in files:
        if not any(b.lang == "python" for b in blocks(f)):
            continue
        # each file in a fresh interpreter: nothing a page imported leaks into the next
        cmd = [sys.executable, "-P", str(Path(__file__).resolve()), "--child", str(f)]
        p = subprocess.run(cmd + (["-v"] if args.verbose else []), capture_output=True, text=True)
        lines = p.stdout.rstrip("\n").split("\n")
        try:
            counts = json.loads(lines[-1])
        except (ValueError, IndexError):
            counts = {"run": 1, "failed": 1, "skipped": 0}
            lines.append(f"FAIL {f.name}: the interpreter running it exited with {p.returncode}\n{p.stderr}")
        else:
            lines = lines[:-1]
        run, failed, skipped = run + counts["run"], failed + counts["failed"], skipped + counts["skipped"]
        for line in lines:
            if line:
                print(line, flush=True)
    print(
        f"doc blocks: {run - failed} passed, {failed} failed, {skipped} skipped ({time.monotonic() - t0:.1f} s)"
    )
    checked, bad, msgs = check_commands(files)
    for m in msgs:
        print(m)
    print(f"doc command lines: {checked - bad} of {checked} name existing commands and options")
    return 1 if failed or bad else 0


if __name__ == "__main__":
    sys.exit(main())
