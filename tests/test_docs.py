"""The docs stay true: every algorithm has its page with every hyperparameter and its default and a row in
the README's and the guide's tables, every relative link in the docs, the README and the notebooks points at
a file that exists, and no committed text (notebook outputs included) holds an absolute path of the machine
that wrote it."""

import ast
import dataclasses
import re
import subprocess
from pathlib import Path

import nbformat
import pytest

from rl_lightning.config import constructor_defaults
from tests.helpers import ALGORITHMS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def hyperparameter_table(page: Path) -> dict[str, str]:
    """``{argument: default}`` from the page's ``| `argument` | `default` | meaning |`` rows."""
    rows = re.findall(r"^\| `([\w.]+)` \| `([^`]*)` \|", page.read_text(), flags=re.M)
    return dict(rows)


@pytest.mark.parametrize("algo", ALGORITHMS, ids=lambda a: a.__name__)
def test_algorithm_page_lists_every_hyperparameter_with_its_default(algo):
    page = ROOT / "docs/algorithms" / f"{algo.__name__.lower()}.md"
    assert page.exists(), f"write {page.relative_to(ROOT)} from docs/algorithms/TEMPLATE.md"
    table = hyperparameter_table(page)
    params = {}
    for name, default in constructor_defaults(algo).items():  # a variant's: its parent's through **kwargs
        if dataclasses.is_dataclass(default):  # a config of its own (run, replay): one row per field
            params.update({f"{name}.{f.name}": getattr(default, f.name) for f in dataclasses.fields(default)})
        else:
            params[name] = default
    missing = [f"| `{n}` | `{d!r}` | ... |" for n, d in params.items() if n not in table]
    assert not missing, "add to the hyperparameter table:\n" + "\n".join(missing)
    assert list(table) == list(params), "keep the table in signature order"
    wrong = {n: (table[n], d) for n, d in params.items() if ast.literal_eval(table[n]) != d}
    assert not wrong, f"defaults differ from the code (page, code): {wrong}"


@pytest.mark.parametrize("index", ["README.md", "docs/guide.md"])
def test_the_algorithm_tables_list_every_algorithm(index):
    text = (ROOT / index).read_text()
    unlisted = [a.__name__ for a in ALGORITHMS if f"algorithms/{a.__name__.lower()}.md)" not in text]
    assert not unlisted, f"{index}'s algorithm table lacks {unlisted}"


def links(text: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"^(https?:|mailto:|#)", t)]


@pytest.mark.parametrize("doc", DOCS + NOTEBOOKS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    if doc.suffix == ".ipynb":
        text = "\n".join(c.source for c in nbformat.read(doc, as_version=4).cells if c.cell_type == "markdown")
    else:
        text = doc.read_text()
    broken = []
    for target in links(text):
        path = (doc.parent / target.split("#")[0]).resolve()
        if not path.exists():
            broken.append(target)
    assert not broken, f"broken links in {doc.name}: {broken}"


# A path of the machine that wrote it: a checkout, a home, a scratch directory, an installed package (a
# warning's location in a notebook's stderr, say). Not one inside a URL or a relative path.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|tmp|root|home|opt|Users|mnt)/[^\s\"'`)]*|site[-]packages\S*")
# Paths inside the Docker image, which the Dockerfile makes (tests/test_dockerfile.py reads them).
IMAGE_PATHS = ("/opt/rl-lightning", "/opt/venv")
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".toml", ".ipynb"}


def committed_files() -> list[Path]:
    """What git tracks, and the untracked files it does not ignore (about to be committed)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout (the Docker image has no .git)")
    return [ROOT / name for name in out.splitlines() if (ROOT / name).is_file()]


def test_no_committed_text_holds_an_absolute_path_of_the_machine_that_wrote_it():
    found = []
    for path in committed_files():
        if path.suffix not in TEXT_SUFFIXES:  # not data (benchmarks/reference_curves.json), not the Dockerfile
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            hits = [m for m in MACHINE_PATH.findall(line) if not m.startswith(IMAGE_PATHS)]
            found += [f"{path.relative_to(ROOT)}:{number}: {hit}" for hit in hits]
    # A notebook: clear the output (or the stderr line) rather than edit the path by hand.
    assert not found, "absolute paths of a machine:\n" + "\n".join(found)
